//! `lectern-projector status`: the stream, the consumer, what is stuck, the dead letters,
//! the lost events, the last verify and a rebuild under way, in one look.
//!
//! NATS and PostgreSQL are read apart: during an outage of one, what the other holds is
//! still shown, what could not be read is named with its cause, and the command exits 1.

use async_nats::jetstream;

use super::{connect, write_stdout, DatabaseArgs, NatsArgs, Output, StatusArgs};
use crate::daemon::{ledger, stuck};
use crate::dead_letters::{self, printable};
use crate::error::ProjectorError;
use crate::lost_events;
use crate::repair::{rebuild, verify};
use crate::stream::{self, ensure_consumer, ensure_stream, StreamId};
use crate::verifications::{self, LastVerification};

/// What NATS says: the stream, the consumer, the stuck batches reported.
struct FromNats {
    /// The stream now (deleted and created again, it is another).
    stream_id: StreamId,
    last_sequence: u64,
    consumer: jetstream::consumer::Info,
    stuck: Vec<stuck::HeldBatch>,
}

/// What PostgreSQL holds: the dead letters, the last verify, a rebuild under way.
struct FromDatabase {
    pool: sqlx::PgPool,
    dead_letters: i64,
    /// Lost events no operator has accepted yet.
    lost_events: u64,
    last_verify: Option<LastVerification>,
    rebuild: Option<rebuild::shadow::UnderWay>,
}

pub async fn status(args: StatusArgs) -> Result<(), ProjectorError> {
    let (nats, database) = tokio::join!(from_nats(&args.nats), from_database(&args.database));
    let unavailable: Vec<(&str, String)> = [
        ("NATS", nats.as_ref().err().map(|error| lectern_runtime::with_causes(error))),
        ("PostgreSQL", database.as_ref().err().cloned()),
    ]
    .into_iter()
    .filter_map(|(what, error)| error.map(|error| (what, error)))
    .collect();
    let (nats, database) = (nats.ok(), database.ok());
    // What the database lacks of what JetStream saw acknowledged: needs both.
    let mut not_held = None;
    if let (Some(nats), Some(database)) = (&nats, &database) {
        not_held =
            ledger::not_held_count(&database.pool, nats.stream_id, nats.consumer.ack_floor.stream_sequence).await?;
    }
    match args.output {
        Output::Json => {
            let mut json = json(nats.as_ref(), database.as_ref(), &unavailable);
            json["acknowledgedNotHeld"] = serde_json::json!(not_held);
            write_stdout(&format!("{json}\n"))?;
        }
        Output::Text => {
            let not_held =
                if nats.is_some() && database.is_some() { describe_not_held(not_held) } else { String::new() };
            write_stdout(&text(nats.as_ref(), database.as_ref(), &not_held, &unavailable))?;
        }
    }
    if unavailable.is_empty() {
        Ok(())
    } else {
        Err(ProjectorError::StatusIncomplete(
            unavailable.iter().map(|(what, _)| *what).collect::<Vec<_>>().join(" and "),
        ))
    }
}

async fn from_nats(args: &NatsArgs) -> Result<FromNats, ProjectorError> {
    let client = stream::connect_once(&args.nats_url).await?;
    let jetstream = jetstream::new(client);
    let mut stream = ensure_stream(&jetstream, usize::from(args.stream_replicas)).await?;
    let mut consumer = ensure_consumer(&stream).await?;
    let info = stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?;
    let (stream_id, last_sequence) = (StreamId::of(info), info.state.last_sequence);
    let consumer = consumer.info().await.map_err(ProjectorError::nats("reading the consumer's info"))?.clone();
    let stuck = stuck::reported(&jetstream).await?;
    Ok(FromNats { stream_id, last_sequence, consumer, stuck })
}

/// What the database says, or why it says nothing, in an operator's words (the pool's own
/// timeout names no cause).
async fn from_database(args: &DatabaseArgs) -> Result<FromDatabase, String> {
    let pool = connect(args).await.map_err(|error| lectern_runtime::with_causes(&error))?;
    let read = async {
        Ok::<_, sqlx::Error>(FromDatabase {
            pool: pool.clone(),
            dead_letters: dead_letters::count(&pool).await?,
            lost_events: lost_events::unaccepted(&pool).await?,
            last_verify: verifications::last(&pool).await?,
            rebuild: rebuild::shadow::under_way(&pool).await?,
        })
    };
    match read.await {
        Ok(read) => Ok(read),
        Err(error) => Err(crate::connections::describe_failure(&pool, &error).await),
    }
}

/// One JSON object; each field that could not be read is null, and `unavailable` names
/// why.
fn json(nats: Option<&FromNats>, database: Option<&FromDatabase>, unavailable: &[(&str, String)]) -> serde_json::Value {
    serde_json::json!({
        "stream": stream::STREAM,
        "consumer": stream::CONSUMER,
        "lastSequence": nats.map(|nats| nats.last_sequence),
        "ackFloor": nats.map(|nats| nats.consumer.ack_floor.stream_sequence),
        "pending": nats.map(|nats| nats.consumer.num_pending),
        "unacknowledged": nats.map(|nats| nats.consumer.num_ack_pending),
        "redelivered": nats.map(|nats| nats.consumer.num_redelivered),
        "waitingPulls": nats.map(|nats| nats.consumer.num_waiting),
        "deadLetters": database.map(|database| database.dead_letters),
        "lostEvents": database.map(|database| database.lost_events),
        "stuckBatches": nats.map(|nats| &nats.stuck),
        "lastVerify": database.and_then(|database| database.last_verify.as_ref()),
        "rebuild": database.and_then(|database| database.rebuild.as_ref()),
        "unavailable": unavailable
            .iter()
            .map(|(what, why)| ((*what).to_owned(), serde_json::Value::from(why.as_str())))
            .collect::<serde_json::Map<_, _>>(),
    })
}

/// The text; `not_held` is the line on what the database lacks, after the consumer's.
fn text(
    nats: Option<&FromNats>,
    database: Option<&FromDatabase>,
    not_held: &str,
    unavailable: &[(&str, String)],
) -> String {
    let mut text = String::new();
    if let Some(nats) = nats {
        text.push_str(&format!(
            "stream {} last sequence {}\nconsumer {} acknowledged through {}\npending (lag) {}, delivered but unacknowledged {}\n\
             redelivered (unacknowledged, sent again) {}, pull requests waiting {}\n",
            stream::STREAM,
            nats.last_sequence,
            stream::CONSUMER,
            nats.consumer.ack_floor.stream_sequence,
            nats.consumer.num_pending,
            nats.consumer.num_ack_pending,
            nats.consumer.num_redelivered,
            nats.consumer.num_waiting,
        ));
    }
    text.push_str(not_held);
    if let Some(database) = database {
        text.push_str(&format!("dead letters {}\n", database.dead_letters));
        if database.lost_events > 0 {
            text.push_str(&format!(
                "lost events {} (acknowledged, lost by the database, no longer in the stream: \
                 `lectern-projector lost-events list`)\n",
                database.lost_events
            ));
        }
    }
    if let Some(nats) = nats {
        text.push_str(&format!("stuck batches {}\n", nats.stuck.len()));
        text.extend(nats.stuck.iter().map(describe_stuck));
    }
    if let Some(database) = database {
        text.push_str(
            &database
                .last_verify
                .as_ref()
                .map_or_else(|| "no verify recorded".to_owned(), verify::report::describe_last),
        );
        text.push('\n');
        text.extend(database.rebuild.as_ref().map(|under_way| format!("{}\n", under_way.describe())));
    }
    for (what, why) in unavailable {
        text.push_str(&format!("{what} unavailable, not shown: {}\n", printable(why)));
    }
    text
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
