//! `lectern-projector verify`: the read model against the stream it was built from.
//!
//! The stream is read from its first event through its last one when the verify began
//! (the *verified history*), and every valid event is written, by the projector's own
//! upserts, into temporary tables ([`expected`]). Once the projectors have acknowledged
//! that history, the two models are compared row by row ([`compare`]). A row that an
//! event after the verified history wrote is not drift: the events read after the
//! comparison say which. Nothing is written to the read model or the consumer; the
//! result is recorded in `read_model_verifications` for `status` and the metrics.
//!
//! # Layout
//! - [`expected`]: the model the verified history implies.
//! - [`compare`]: the differing records, classified.
//! - [`report`]: the verdict as text or JSON, recorded.

pub mod compare;
pub mod expected;
pub mod report;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_schema::events::{ChangeEvent, EntityKind};
use serde::Serialize;
use uuid::Uuid;

use crate::error::ProjectorError;
use crate::history::{read_through, subjects, whole_history, MissingHistory};
use crate::repair::progress::Progress;
use crate::stream::{CONSUMER, STREAM};
use compare::{Counts, Drift, WrittenSince};
use expected::Expected;

/// What to verify.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// One workspace, or all.
    pub workspace: Option<Uuid>,
    /// Drifted records to describe (all are counted).
    pub show: usize,
    /// How long to wait for the projectors to acknowledge the verified history.
    pub wait_for_projector: Duration,
}

/// What a verify concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Every record's row is what the stream says.
    Agreed,
    /// At least one record's row is not.
    Drifted,
    /// The verify could not tell (see the reason).
    Undecided,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agreed => "agreed",
            Self::Drifted => "drifted",
            Self::Undecided => "undecided",
        }
    }

    /// The command's exit code: 0 agreed, 1 drift, 2 undecided.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Agreed => 0,
            Self::Drifted => 1,
            Self::Undecided => 2,
        }
    }
}

/// One workspace's counts for one resource.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceCounts {
    pub workspace_id: Uuid,
    pub resource: &'static str,
    #[serde(flatten)]
    pub counts: Counts,
}

/// The verdict, as `--output json` prints it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub outcome: Outcome,
    /// Why it could not tell, when undecided.
    pub reason: Option<String>,
    pub workspace: Option<Uuid>,
    /// The verified history: events 1 to this sequence.
    pub through_sequence: u64,
    pub events_read: u64,
    /// Events that break the contract or that the database refuses: no row reflects them.
    pub events_set_aside: u64,
    pub records: u64,
    pub drifted: u64,
    pub written_since: u64,
    pub per_workspace: Vec<WorkspaceCounts>,
    /// The first drifted records, in table and key order.
    pub first_drifted: Vec<Drift>,
    pub seconds: f64,
}

impl Verdict {
    fn undecided(options: &VerifyOptions, through_sequence: u64, reason: String, started: Instant) -> Self {
        Self {
            outcome: Outcome::Undecided,
            reason: Some(reason),
            workspace: options.workspace,
            through_sequence,
            events_read: 0,
            events_set_aside: 0,
            records: 0,
            drifted: 0,
            written_since: 0,
            per_workspace: Vec::new(),
            first_drifted: Vec::new(),
            seconds: started.elapsed().as_secs_f64(),
        }
    }
}

/// Verifies the read model at `database_url` against the stream, and records the verdict.
pub async fn verify(
    client: async_nats::Client,
    database_url: &str,
    options: &VerifyOptions,
) -> Result<Verdict, ProjectorError> {
    let started = Instant::now();
    let verdict = verify_unrecorded(client, database_url, options, started).await?;
    report::record(database_url, &verdict).await?;
    Ok(verdict)
}

async fn verify_unrecorded(
    client: async_nats::Client,
    database_url: &str,
    options: &VerifyOptions,
    started: Instant,
) -> Result<Verdict, ProjectorError> {
    let jetstream = jetstream::new(client);
    let Ok(mut stream) = jetstream.get_stream(STREAM).await else {
        let reason = format!("there is no {STREAM} stream: nothing was ever published, or it was deleted");
        return Ok(Verdict::undecided(options, 0, reason, started));
    };
    let through = match whole_history(&mut stream).await? {
        Ok(last) => last,
        Err(missing) => {
            let mut reason = missing_history(&missing);
            let mut database = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await?;
            if let Some(lost) = crate::lost_events::describe(&mut database).await? {
                reason.push_str(&format!(". {lost}"));
            }
            return Ok(Verdict::undecided(options, 0, reason, started));
        }
    };
    let mut expected = Expected::create(database_url).await?;
    let mut reading = read_through(&stream, subjects(options.workspace), 1, through).await?;
    let mut progress = Progress::new("verify", reading.total.min(through));
    while let Some(batch) = reading.batches.recv().await {
        let batch = batch?;
        expected.write(&batch).await?;
        progress.advance(batch.len() as u64);
    }
    progress.finish();
    let events_read = progress.done();
    tracing::info!(
        events = events_read,
        through,
        events_per_second = progress.rate().round(),
        "verify read the stream"
    );

    if let Err(reason) = projectors_acknowledged(&stream, through, options.wait_for_projector).await? {
        return Ok(Verdict::undecided(options, through, reason, started));
    }
    let tables = expected::TABLES;
    let differences = compare::differences(expected.connection(), tables, options.workspace).await?;
    // Every row the comparison saw was written by an event the stream held by now.
    let compared_at =
        stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?.state.last_sequence;
    let since = written_since(&stream, options.workspace, through, compared_at).await?;
    let comparison = compare::conclude(expected.connection(), tables, differences, &since, options.show).await?;
    let mut verdict = Verdict {
        outcome: Outcome::Agreed,
        reason: None,
        workspace: options.workspace,
        through_sequence: through,
        events_read,
        events_set_aside: expected.set_aside + expected.refused,
        records: 0,
        drifted: 0,
        written_since: 0,
        per_workspace: Vec::new(),
        first_drifted: comparison.first,
        seconds: 0.0,
    };
    for ((workspace_id, resource), counts) in comparison.counts {
        verdict.records += counts.records;
        verdict.drifted += counts.drifted;
        verdict.written_since += counts.written_since;
        verdict.per_workspace.push(WorkspaceCounts { workspace_id, resource, counts });
    }
    if verdict.drifted > 0 {
        verdict.outcome = Outcome::Drifted;
    }
    verdict.seconds = started.elapsed().as_secs_f64();
    Ok(verdict)
}

fn missing_history(missing: &MissingHistory) -> String {
    format!(
        "{missing}; a record's newest event may be among those, so the read model cannot be checked against the stream"
    )
}

/// Waits until the projectors' consumer has acknowledged every event through `through`
/// (so that every row the history implies has been written), for at most `wait`.
/// `Err`: why the comparison would not tell drift from events still on their way.
async fn projectors_acknowledged(
    stream: &jetstream::stream::Stream,
    through: u64,
    wait: Duration,
) -> Result<Result<(), String>, ProjectorError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut told = false;
    loop {
        let Ok(info) = stream.consumer_info(CONSUMER).await else {
            return Ok(Err(format!("no projector has consumed the stream yet (it has no consumer {CONSUMER})")));
        };
        let acknowledged = info.ack_floor.stream_sequence;
        if acknowledged >= through {
            return Ok(Ok(()));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Err(format!(
                "the projectors have applied events through sequence {acknowledged} of {through} after waiting \
                 {wait:?}: run verify again once they have caught up (lectern-projector status shows how far they are)"
            )));
        }
        if !told {
            tracing::info!(acknowledged, through, "waiting for the projectors to apply the verified history");
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The records, at the versions they were written at, of the valid events after
/// sequence `after` through `through`.
async fn written_since(
    stream: &jetstream::stream::Stream,
    workspace: Option<Uuid>,
    after: u64,
    through: u64,
) -> Result<WrittenSince, ProjectorError> {
    let mut since = WrittenSince::new();
    let mut reading = read_through(stream, subjects(workspace), after + 1, through).await?;
    while let Some(batch) = reading.batches.recv().await {
        for message in batch? {
            if let Ok(event) = ChangeEvent::decode_from(&message.subject, &message.payload) {
                let resource = match event.event_type.entity {
                    EntityKind::Contact => lectern_read_model::contacts::TABLE,
                    EntityKind::Item => lectern_read_model::items::TABLE,
                };
                since.insert((resource, event.workspace_id, event.entity_id, event.version));
            }
        }
    }
    Ok(since)
}
