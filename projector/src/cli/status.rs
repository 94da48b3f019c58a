//! `lectern-projector status`: the stream, the consumer, what is stuck, the dead letters,
//! the last verify and a rebuild under way, in one look.

use async_nats::jetstream;

use super::{connect, write_stdout, Output, StatusArgs};
use crate::daemon::{ledger, stuck};
use crate::dead_letters::printable;
use crate::error::ProjectorError;
use crate::repair::{dead_letters, rebuild, verify};
use crate::stream::{self, ensure_consumer, ensure_stream};

pub async fn status(args: StatusArgs) -> Result<(), ProjectorError> {
    let client = stream::connect_once(&args.nats.nats_url).await?;
    let jetstream = jetstream::new(client);
    let mut stream = ensure_stream(&jetstream, usize::from(args.nats.stream_replicas)).await?;
    let mut consumer = ensure_consumer(&stream).await?;
    let last_sequence =
        stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?.state.last_sequence;
    let info = consumer.info().await.map_err(ProjectorError::nats("reading the consumer's info"))?.clone();
    let stuck = stuck::reported(&jetstream).await?;
    let pool = connect(&args.database).await?;
    let not_held = ledger::not_held(&pool, info.ack_floor.stream_sequence).await?;
    let dead = dead_letters::count(&pool).await?;
    let last_verify = verify::report::last(&pool).await?;
    let rebuild = rebuild::shadow::under_way(&pool).await?;
    let status = serde_json::json!({
        "stream": stream::STREAM,
        "consumer": stream::CONSUMER,
        "lastSequence": last_sequence,
        "ackFloor": info.ack_floor.stream_sequence,
        "pending": info.num_pending,
        "unacknowledged": info.num_ack_pending,
        "acknowledgedNotHeld": not_held,
        "deadLetters": dead,
        "stuckBatches": stuck,
        "lastVerify": last_verify,
        "rebuild": rebuild,
    });
    match args.output {
        Output::Json => write_stdout(&format!("{status}\n")),
        Output::Text => write_stdout(&format!(
            "stream {} last sequence {}\nconsumer {} acknowledged through {}\npending (lag) {}, delivered but unacknowledged {}\n{}dead letters {}\nstuck batches {}\n{}{}{}\n",
            stream::STREAM,
            last_sequence,
            stream::CONSUMER,
            info.ack_floor.stream_sequence,
            info.num_pending,
            info.num_ack_pending,
            describe_not_held(not_held),
            dead,
            stuck.len(),
            stuck.iter().map(describe_stuck).collect::<String>(),
            last_verify.map_or_else(|| "no verify recorded".to_owned(), |last| last.describe()),
            rebuild.map_or_else(String::new, |under_way| format!("\n{}", under_way.describe()))
        )),
    }
}

/// The events acknowledged that the database does not hold, when there are any: the
/// lag after a restore or a failover, which the consumer's own counts do not show.
fn describe_not_held(not_held: Option<u64>) -> String {
    match not_held {
        Some(0) => String::new(),
        Some(events) => format!(
            "acknowledged but not in this database {events} (lost in a restore or failover; a running projector \
             applies them again within seconds)\n"
        ),
        None => "acknowledged but not in this database: unknown until a projector has run on it\n".to_owned(),
    }
}

/// One stuck batch, indented under the count.
fn describe_stuck(held: &stuck::HeldBatch) -> String {
    let batch = &held.batch;
    format!(
        "    {} message(s) from stream sequence {}, in hand since {} ({}): {}\n",
        batch.messages,
        batch.first_sequence,
        batch.pulled_at.to_rfc3339(),
        held.process,
        printable(batch.last_error.as_deref().unwrap_or("its first attempt has not returned"))
    )
}
