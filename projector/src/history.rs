//! The `CHANGES` stream's history read back, apart from the durable consumer: whether the
//! stream still holds every event published to it ([`whole_history`]), and its events
//! between two sequences, in order ([`read_through`]).
//!
//! Both sides read it. The running projector's ledger ([`crate::daemon::ledger`]) reads
//! back the events the database lost, to apply them again. The operator's `verify` and
//! `rebuild` ([`crate::repair`]) read it from the first event, and need all of it: a
//! record's state is its highest-version event, and an event the stream no longer holds
//! may be that one. So before they read, the stream's state is checked for events it
//! dropped (limits, purges, deletes).

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::error::ProjectorError;
use crate::message::Received;
use crate::stream::SUBJECTS;

/// Messages handed over at once by [`read_through`].
pub const BATCH: usize = 1_000;
/// Longest wait for the next message the stream says it holds before giving up.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the stream cannot tell a record's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MissingHistory {
    #[error(
        "the stream holds events from sequence {first} on: 1 to {} were dropped (a limit on \
         age, count, size or per subject, or a purge)",
        first - 1
    )]
    StartsLate { first: u64 },
    #[error("{deleted} event(s) between sequences {first} and {last} were deleted from the stream")]
    Gaps { first: u64, last: u64, deleted: u64 },
}

/// The stream's last sequence now, if it holds every event ever published to it.
pub async fn whole_history(stream: &mut Stream) -> Result<Result<u64, MissingHistory>, ProjectorError> {
    let state = stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?.state.clone();
    if state.messages == 0 {
        // Never written to (0, 0), or every event removed (first = last + 1).
        return Ok(match state.last_sequence {
            0 => Ok(0),
            last => Err(MissingHistory::StartsLate { first: last + 1 }),
        });
    }
    if state.first_sequence > 1 {
        return Ok(Err(MissingHistory::StartsLate { first: state.first_sequence }));
    }
    let span = state.last_sequence - state.first_sequence + 1;
    if state.messages < span {
        let (first, last) = (state.first_sequence, state.last_sequence);
        return Ok(Err(MissingHistory::Gaps { first, last, deleted: span - state.messages }));
    }
    Ok(Ok(state.last_sequence))
}

/// The subjects of `workspace`'s events, or of every event.
pub fn subjects(workspace: Option<Uuid>) -> String {
    workspace.map_or_else(|| SUBJECTS.to_owned(), |workspace| format!("changes.{workspace}.>"))
}

/// Messages to read, as far as the stream can say when reading starts.
pub struct Reading {
    pub batches: mpsc::Receiver<Result<Vec<Received>, ProjectorError>>,
    /// How many of the subjects' messages up to the end the stream held when reading
    /// began (the ones after `through` included): the progress bar's total.
    pub total: u64,
}

/// Reads the messages of `subjects` from sequence `from` through sequence `through`, in
/// order, in batches of up to [`BATCH`], from a task of its own, so that the caller
/// writes one batch while the next is read. An ordered consumer of its own: the
/// projectors' durable consumer is not touched.
pub async fn read_through(
    stream: &Stream,
    subjects: String,
    from: u64,
    through: u64,
) -> Result<Reading, ProjectorError> {
    let (sender, batches) = mpsc::channel(4);
    if through < from.max(1) {
        return Ok(Reading { batches, total: 0 });
    }
    let subjects_read = subjects.clone();
    let mut consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: subjects,
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: from.max(1) },
            ..Default::default()
        })
        .await
        .map_err(ProjectorError::nats("creating a consumer to read the stream"))?;
    let total = consumer.info().await.map_err(ProjectorError::nats("reading the reading consumer's info"))?.num_pending;
    if total == 0 {
        return Ok(Reading { batches, total });
    }
    let mut messages = consumer.messages().await.map_err(ProjectorError::nats("reading the stream"))?;
    let (stream, subjects) = (stream.clone(), subjects_read);
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let next = match tokio::time::timeout(IDLE_TIMEOUT, messages.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(error))) => {
                    let _ = sender.send(Err(ProjectorError::nats("reading the stream")(error))).await;
                    return;
                }
                Ok(None) | Err(_) => {
                    let stalled = format!("no message for {IDLE_TIMEOUT:?} before sequence {through}");
                    let _ = sender.send(Err(ProjectorError::nats("reading the stream")(stalled))).await;
                    return;
                }
            };
            let (sequence, pending) = match next.info() {
                Ok(info) => (info.stream_sequence, info.pending),
                Err(error) => {
                    let _ = sender.send(Err(ProjectorError::nats("reading a message's sequence")(error))).await;
                    return;
                }
            };
            if sequence > through {
                break;
            }
            let message = next.message;
            batch.push(Received {
                subject: message.subject.to_string(),
                stream_sequence: sequence,
                payload: message.payload.to_vec(),
            });
            // `pending`: messages of these subjects after this one, as the server counted them
            // when it delivered this one. nats-server 2.9 sometimes counts 0 with messages
            // still to come (seen reading a stream being published to: the last one to four
            // of the range left out), so a 0 before `through` is checked against the stream.
            let last =
                sequence >= through || (pending == 0 && !more_before(&stream, &subjects, sequence, through).await);
            let full = batch.len() == BATCH || last;
            if full && sender.send(Ok(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))).await.is_err() {
                return;
            }
            if last {
                return;
            }
        }
        if !batch.is_empty() {
            let _ = sender.send(Ok(batch)).await;
        }
    });
    Ok(Reading { batches, total })
}

/// Whether the stream holds a message of `subjects` after `sequence` and at most `through`
/// (when it cannot tell, that it does not: the read ends, as it did before this check).
async fn more_before(stream: &Stream, subjects: &str, sequence: u64, through: u64) -> bool {
    match stream.get_first_raw_message_by_subject(subjects, sequence + 1).await {
        Ok(next) => next.sequence <= through,
        Err(error) if error.kind() == RawMessageErrorKind::NoMessageFound => false,
        Err(error) => {
            tracing::warn!(%error, "asking the stream whether more events follow; ending the read");
            false
        }
    }
}
