//! `lectern-projector rebuild`: a complete read model built again from the stream beside
//! the live one, then folded into it.
//!
//! 1. One rebuild at a time: a session advisory lock, held to the end.
//! 2. The stream must hold its whole history ([`crate::history::whole_history`]).
//! 3. The shadow tables ([`shadow`]) are filled from the stream's first event while the
//!    API serves the live tables and the projectors keep writing them; each batch moves
//!    the recorded position in the same transaction, so a rebuild killed at any point
//!    resumes where it stopped, and the live tables are untouched until step 6.
//! 4. Catching up: the events published meanwhile, until few are left.
//! 5. The records whose rows differ are found, with nobody held.
//! 6. One transaction ([`swap`]): the live tables are locked against other writers (never
//!    against readers), the last events are read into the shadow, the records that can
//!    have come to differ since step 5 join those found, and for each whose shadow row
//!    differs from its live row the shadow row is written to the live table (and so takes
//!    a new position in the changes feed; rows that agree keep theirs); served rows no
//!    event wrote become removals, and the shadow tables are dropped.
//!
//! Dead letters are read, not written: events the projector set aside stay aside.
//!
//! # Layout
//! - [`shadow`]: the shadow tables and their position.
//! - [`swap`]: folding the shadow model into the live one.

pub mod shadow;
pub mod swap;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde::Serialize;
use sqlx::{Connection, PgConnection};

use crate::dead_letters;
use crate::error::ProjectorError;
use crate::history::{read_through, subjects, whole_history, Reading};
use crate::repair::progress::Progress;
use crate::stream::STREAM;
use shadow::Start;
use swap::Folded;

/// The advisory lock a rebuild holds (any number both sides agree on).
pub const REBUILD_LOCK: i64 = 0x6c65_6374_6572_6e31;
/// Catching up stops when fewer than this many events were published since the last pass,
/// or when a pass did not shrink what is left (events published faster than the rebuild
/// reads them): the rest is read while the live tables are held.
const CAUGHT_UP: u64 = 2_000;
/// The most events the swap reads while the projectors' writes wait for it (a few seconds'
/// worth); a rebuild that cannot get closer stops instead.
const MOST_READ_IN_THE_SWAP: u64 = 50_000;

/// What a rebuild did.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuilt {
    /// Where the shadow tables were when this run began (0: from scratch).
    pub resumed_from: u64,
    /// The stream's events 1 to this sequence are in the folded model.
    pub through_sequence: u64,
    pub events_read: u64,
    pub events_set_aside: u64,
    #[serde(flatten)]
    pub folded: Folded,
    /// Building and catching up.
    pub build_seconds: f64,
    /// The folding transaction, from taking the live tables to its commit: how long the
    /// projectors' writes waited (readers never do).
    pub swap_seconds: f64,
}

/// Rebuilds the read model at `database_url` from the stream. Without `force`, a fold that
/// would remove a large share of a workspace's records ([`swap::too_many_removals`]) is
/// refused, and the shadow tables are kept for a run that forces it.
pub async fn rebuild(client: async_nats::Client, database_url: &str, force: bool) -> Result<Rebuilt, ProjectorError> {
    let started = Instant::now();
    let mut connection = PgConnection::connect(database_url).await?;
    let locked: bool =
        sqlx::query_scalar("select pg_try_advisory_lock($1)").bind(REBUILD_LOCK).fetch_one(&mut connection).await?;
    if !locked {
        return Err(ProjectorError::Usage(
            "another rebuild is running (it holds the rebuild lock): nothing was done; wait for it to finish"
                .to_owned(),
        ));
    }
    let jetstream = jetstream::new(client);
    let mut stream = jetstream
        .get_stream(STREAM)
        .await
        .map_err(|_| ProjectorError::Usage(format!("there is no {STREAM} stream to rebuild from: nothing was done")))?;
    let last = match whole_history(&mut stream).await? {
        Ok(last) => last,
        Err(missing) => {
            let lost = crate::lost_events::describe(&mut connection).await?.map(|lost| format!(". {lost}"));
            return Err(ProjectorError::Usage(format!(
                "{missing}; a rebuild needs every event ever published, so nothing was done (keep the stream \
                 without limits: docs/operations.md, NATS){}",
                lost.unwrap_or_default()
            )));
        }
    };
    let resumed_from = match shadow::prepare(&mut connection).await? {
        Start::Fresh => 0,
        Start::Resumed(through) => {
            tracing::info!(through, "resuming the rebuild whose shadow tables hold the stream through this sequence");
            through
        }
    };
    let dead_letters = dead_letters::sequences(&mut connection).await?;
    let mut set_aside = 0;
    let mut through = resumed_from;

    // Building, then catching up while much is being published.
    let mut progress = Progress::new("rebuild", last.saturating_sub(through));
    let mut target = last;
    let mut behind = u64::MAX;
    loop {
        let mut reading = read_through(&stream, subjects(None), through + 1, target).await?;
        // Before the swap, what was written is found by comparing the models.
        through = load_all(&mut connection, &mut reading, &dead_letters, &mut set_aside, &mut progress, through, None)
            .await?;
        let now = stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?.state.last_sequence;
        // Caught up, or not gaining: events published faster than this reads them would
        // keep it catching up for ever; the swap reads the rest with the writers held.
        let left = now.saturating_sub(through);
        if left < CAUGHT_UP {
            break;
        }
        if left >= behind {
            if left > MOST_READ_IN_THE_SWAP {
                return Err(ProjectorError::Usage(format!(
                    "events are published faster than the rebuild reads them ({left} left after a pass that did not \
                     gain on them), and reading that many while the projectors' writes wait would stall the read \
                     model; nothing was changed, and the shadow tables are kept: run `rebuild` again when publishing \
                     slows (it resumes)"
                )));
            }
            break;
        }
        behind = left;
        target = now;
    }
    progress.finish();
    let build_seconds = started.elapsed().as_secs_f64();
    tracing::info!(through, build_seconds, "rebuild: the shadow tables hold the stream; folding them in");

    // The records that differ, found with nobody held; then the swap: the live tables held
    // against writers, the last events, the fold of what differs.
    swap::find_candidates(&mut connection).await?;
    let swap_started = Instant::now();
    let mut transaction = connection.begin().await?;
    // A projector's long transaction must not hold the swap (and the writers queued behind
    // it) for long: past this, the swap fails and the rebuild can be run again.
    sqlx::query(&format!("set local lock_timeout = '{}s'", SWAP_LOCK_TIMEOUT.as_secs()))
        .execute(&mut *transaction)
        .await?;
    // Both live tables in `share row exclusive` mode (writers wait, readers never do),
    // taken before the transaction writes anything, so that the changes feed waits for
    // this transaction's corrections (`read_model_begin_write`).
    sqlx::query("select read_model_begin_write('share row exclusive')").execute(&mut *transaction).await?;
    // Its corrections are the stream's newest versions: allowed in a history that has not
    // caught up yet, as the ledger's are.
    sqlx::query("select set_config('lectern.applying_again', 'on', true)").execute(&mut *transaction).await?;
    let end = stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?.state.last_sequence;
    let mut reading = read_through(&stream, subjects(None), through + 1, end).await?;
    let mut last_written = Vec::new();
    through = load_all(
        &mut transaction,
        &mut reading,
        &dead_letters,
        &mut set_aside,
        &mut progress,
        through,
        Some(&mut last_written),
    )
    .await?;
    let folded = swap::fold(&mut transaction, &last_written, force).await?;
    shadow::drop_all(&mut transaction).await?;
    transaction.commit().await?;
    let swap_seconds = swap_started.elapsed().as_secs_f64();
    tracing::info!(corrected = folded.corrected, removed = folded.removed, swap_seconds, "rebuild folded in");
    Ok(Rebuilt {
        resumed_from,
        through_sequence: through,
        events_read: progress.done(),
        events_set_aside: set_aside,
        folded,
        build_seconds,
        swap_seconds,
    })
}

/// Loads every batch of `reading` into the shadow tables; returns the position reached.
async fn load_all(
    connection: &mut PgConnection,
    reading: &mut Reading,
    dead_letters: &std::collections::HashSet<i64>,
    set_aside: &mut u64,
    progress: &mut Progress,
    mut through: u64,
    mut written: Option<&mut Vec<shadow::Written>>,
) -> Result<u64, ProjectorError> {
    while let Some(batch) = reading.batches.recv().await {
        let batch = batch?;
        shadow::load(connection, &batch, dead_letters, set_aside, written.as_deref_mut()).await?;
        progress.advance(batch.len() as u64);
        through = batch.last().map_or(through, |message| message.stream_sequence);
    }
    Ok(through)
}

/// How long the swap may wait for the live tables before it gives up.
pub const SWAP_LOCK_TIMEOUT: Duration = Duration::from_secs(30);
