//! The `lectern-projector` command line.

use std::io::{Read, Write};
use std::process::ExitCode;

use async_nats::jetstream;
use clap::{Args, Parser, Subcommand};
use lectern_schema::events::ChangeEvent;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::consumer::{self, RunSettings};
use crate::dead_letters;
use crate::error::ProjectorError;
use crate::operations;
use crate::stream::{self, ensure_consumer, ensure_stream};
use crate::stuck;
use crate::verify::{self, VerifyOptions};
use crate::workspace_indexes::OwnIndexSettings;
use lectern_runtime::server::OperationsServer;

/// Lectern's projector: change events from NATS JetStream into the read model.
#[derive(Debug, Parser)]
#[command(name = "lectern-projector", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume change events into the read model until SIGTERM or Ctrl-C.
    Run(RunArgs),
    /// Stream position, consumer progress, lag, dead letters and the last verify.
    Status(StatusArgs),
    /// Compare the read model with the stream; exit 0 when they agree, 1 on drift, 2
    /// when it cannot tell.
    Verify(VerifyArgs),
    /// Build the read model again from the stream beside the live one, then fold it in:
    /// only the records that differ change (and reach the changes feed). Resumable.
    Rebuild(RebuildArgs),
    /// Inspect and retry messages that broke the contract.
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
    /// Publish change events (JSON, one per file or one per line on stdin) to their subjects.
    Publish(PublishArgs),
    /// Exit 0 if the URL answers 200 (a container health check that needs no curl).
    Healthcheck(HealthcheckArgs),
}

#[derive(Clone, Debug, Args)]
struct NatsArgs {
    /// NATS server URL, or a comma-separated list of a cluster's servers.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Copies of the CHANGES stream, one per server of a JetStream cluster, when the
    /// command creates it (an existing stream keeps its own).
    #[arg(long, env = "LECTERN_STREAM_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=stream::MAX_STREAM_REPLICAS as i64))]
    stream_replicas: u8,
}

#[derive(Clone, Debug, Args)]
struct DatabaseArgs {
    /// PostgreSQL connection URL of the read model (migrated by `lectern-api migrate`).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/lectern",
        hide_env_values = true
    )]
    database_url: String,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    database: DatabaseArgs,
    /// Most events applied in one transaction.
    #[arg(long, env = "LECTERN_PROJECTOR_BATCH_SIZE", default_value_t = 1_000, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    batch_size: u16,
    /// Batches applied at once, each in its own transaction (one PostgreSQL session
    /// each).
    #[arg(long, env = "LECTERN_PROJECTOR_CONCURRENT_BATCHES", default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=16))]
    concurrent_batches: u8,
    /// Active records from which a workspace gets a search index of its own (per table;
    /// dropped below half of it).
    #[arg(long, env = "LECTERN_PROJECTOR_OWN_SEARCH_INDEX_FROM", default_value_t = 50_000, value_parser = clap::value_parser!(i64).range(1..))]
    own_search_index_from: i64,
    /// Seconds between two looks for workspaces that need (or no longer need) an index
    /// of their own.
    #[arg(long, env = "LECTERN_PROJECTOR_OWN_SEARCH_INDEX_EVERY", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    own_search_index_every: u64,
    /// Seconds a batch may be in hand without committing before readiness, `status` and
    /// the lectern_projector_batches_stuck gauge report it as stuck.
    #[arg(long, env = "LECTERN_PROJECTOR_STUCK_AFTER", default_value_t = stuck::DEFAULT_STUCK_AFTER.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    stuck_after: u64,
    /// Address of the operations listener (/metrics, /healthz, /readyz); keep it private.
    #[arg(long, env = "LECTERN_PROJECTOR_METRICS_LISTEN", default_value = "127.0.0.1:9465")]
    metrics_listen: std::net::SocketAddr,
}

#[derive(Debug, Args)]
struct HealthcheckArgs {
    /// What to probe (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:9465/readyz")]
    url: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Args)]
struct StatusArgs {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    database: DatabaseArgs,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    database: DatabaseArgs,
    /// Only this workspace's records.
    #[arg(long)]
    workspace: Option<uuid::Uuid>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    /// Drifted records described column by column (all are counted).
    #[arg(long, default_value_t = 20)]
    show: usize,
    /// Seconds to wait for the projectors to apply the events the verify read.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    wait_for_projector: u64,
}

#[derive(Debug, Args)]
struct RebuildArgs {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    database: DatabaseArgs,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    /// Remove the records no event wrote even when they are more than a tenth of a
    /// workspace's (without it, such a rebuild stops before changing anything).
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Subcommand)]
enum DeadLettersCommand {
    /// List dead letters.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Re-validate and apply dead letters; fixed ones leave the table.
    Retry {
        #[command(flatten)]
        database: DatabaseArgs,
        /// The dead letter to retry.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<i64>,
        /// Retry every dead letter.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Args)]
struct PublishArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// Files with one JSON event each; without files, JSON events one per line on stdin.
    files: Vec<std::path::PathBuf>,
}

pub fn main() -> ExitCode {
    let cli: Cli = lectern_runtime::parse_args();
    init_logging();
    match cli.command {
        // Its exit code says what it found; one it could not look with is "cannot tell".
        Command::Verify(args) => lectern_runtime::run_command_exiting(verify(args), ExitCode::from(2)),
        command => lectern_runtime::run_command(run(command)),
    }
}

fn init_logging() {
    lectern_runtime::init_logging("info,async_nats=warn");
}

async fn run(command: Command) -> Result<(), ProjectorError> {
    match command {
        Command::Run(args) => run_projector(args).await,
        Command::Status(args) => status(args).await,
        Command::Verify(args) => verify(args).await.map(drop),
        Command::Rebuild(args) => rebuild(args).await,
        Command::DeadLetters(DeadLettersCommand::List { database, output }) => {
            let letters = dead_letters::list(&connect(&database).await?).await?;
            match output {
                Output::Json => write_stdout(&format!("{}\n", to_json(&letters)?)),
                Output::Text if letters.is_empty() => write_stdout("No dead letters.\n"),
                Output::Text => write_stdout(
                    &letters
                        .iter()
                        .map(|letter| {
                            format!(
                                "{}  seq {}  {}  {}\n    {}\n",
                                letter.id,
                                letter.stream_sequence,
                                letter.received_at.to_rfc3339(),
                                dead_letters::printable(&letter.subject),
                                dead_letters::printable(&letter.reason)
                            )
                        })
                        .collect::<String>(),
                ),
            }
        }
        Command::DeadLetters(DeadLettersCommand::Retry { database, id, all }) => {
            let pool = connect(&database).await?;
            let outcome = dead_letters::retry(&pool, if all { None } else { id }).await?;
            if !all && outcome.applied.is_empty() && outcome.still_failing.is_empty() {
                return Err(ProjectorError::Usage(format!("no dead letter with id {}", id.unwrap_or_default())));
            }
            let mut text = format!("{} applied and removed", outcome.applied.len());
            for (id, reason) in &outcome.still_failing {
                text.push_str(&format!("\n{id} still fails: {}", dead_letters::printable(reason)));
            }
            write_stdout(&format!("{text}\n"))
        }
        Command::Publish(args) => publish(args).await,
        Command::Healthcheck(args) => lectern_runtime::probe::probe(&args.url).await.map_err(ProjectorError::Unhealthy),
    }
}

async fn connect(args: &DatabaseArgs) -> Result<PgPool, ProjectorError> {
    Ok(consumer::pool(&args.database_url)?)
}

async fn run_projector(args: RunArgs) -> Result<(), ProjectorError> {
    // Metrics recorded before the recorder exists are lost: install it first thing.
    let _ = lectern_runtime::server::metrics_handle();
    let pool = consumer::pool_for(&args.database.database_url, usize::from(args.concurrent_batches))?;
    let operations_server =
        OperationsServer::bind(args.metrics_listen).await.map_err(|source| ProjectorError::Listen {
            setting: "--metrics-listen/LECTERN_PROJECTOR_METRICS_LISTEN",
            address: args.metrics_listen,
            source,
        })?;
    tracing::info!(
        metrics = %operations_server.local_addr().unwrap_or(args.metrics_listen),
        "operations listener ready"
    );
    let client = stream::connect(&args.nats.nats_url).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let stopped = shutdown.clone();
    let batches = stuck::Batches::new(std::time::Duration::from_secs(args.stuck_after));
    let operations_task = tokio::spawn(operations_server.run(
        operations::readiness_check(client.clone(), pool.clone(), batches.clone()),
        operations::before_scrape(batches.clone()),
        async move { stopped.cancelled().await },
    ));
    tokio::spawn(export_last_verification(pool.clone(), shutdown.clone()));
    let settings = RunSettings {
        batch_size: usize::from(args.batch_size),
        concurrent_batches: usize::from(args.concurrent_batches),
        own_indexes: OwnIndexSettings {
            from_rows: args.own_search_index_from,
            check_every: std::time::Duration::from_secs(args.own_search_index_every),
        },
        stream_replicas: usize::from(args.nats.stream_replicas),
        ..RunSettings::default()
    };
    let consumed = consumer::run_watched(client, pool, settings, batches, shutdown.clone()).await;
    shutdown.cancel();
    if let Ok(Err(error)) = operations_task.await {
        tracing::warn!(%error, "the operations listener stopped with an error");
    }
    consumed
}

/// How often the running projector reads the last verify for its metrics.
const LAST_VERIFICATION_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// Exports the last verify recorded (by whichever process ran it) as metrics, until
/// `shutdown`.
async fn export_last_verification(pool: PgPool, shutdown: CancellationToken) {
    loop {
        match verify::report::last(&pool).await {
            Ok(Some(last)) => crate::metrics::record_last_verification(&last),
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, "reading the last verify for the metrics"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(LAST_VERIFICATION_EVERY) => {}
        }
    }
}

/// Cancels `token` on Ctrl-C or SIGTERM.
async fn cancel_on_signal(token: CancellationToken) {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing the batch in hand");
    token.cancel();
}

async fn verify(args: VerifyArgs) -> Result<ExitCode, ProjectorError> {
    let client = stream::connect_once(&args.nats.nats_url).await?;
    let options = VerifyOptions {
        workspace: args.workspace,
        show: args.show,
        wait_for_projector: std::time::Duration::from_secs(args.wait_for_projector),
    };
    let verdict = verify::verify(client, &args.database.database_url, &options).await?;
    match args.output {
        Output::Json => write_stdout(&format!("{}\n", to_json(&verdict)?))?,
        Output::Text => write_stdout(&verify::report::text(&verdict))?,
    }
    Ok(ExitCode::from(verdict.outcome.exit_code()))
}

async fn rebuild(args: RebuildArgs) -> Result<(), ProjectorError> {
    let client = stream::connect_once(&args.nats.nats_url).await?;
    let rebuilt = crate::rebuild::rebuild(client, &args.database.database_url, args.force).await?;
    match args.output {
        Output::Json => write_stdout(&format!("{}\n", to_json(&rebuilt)?)),
        Output::Text => write_stdout(&format!(
            "rebuild: folded in through stream sequence {} ({} event(s) read{}, {} set aside): {} record(s) \
             corrected, {} removed; built in {:.1} s, the swap held writers for {:.3} s\n",
            rebuilt.through_sequence,
            rebuilt.events_read,
            if rebuilt.resumed_from > 0 {
                format!(", resumed after sequence {}", rebuilt.resumed_from)
            } else {
                String::new()
            },
            rebuilt.events_set_aside,
            rebuilt.folded.corrected,
            rebuilt.folded.removed,
            rebuilt.build_seconds,
            rebuilt.swap_seconds
        )),
    }
}

async fn status(args: StatusArgs) -> Result<(), ProjectorError> {
    let client = stream::connect_once(&args.nats.nats_url).await?;
    let jetstream = jetstream::new(client);
    let mut stream = ensure_stream(&jetstream, usize::from(args.nats.stream_replicas)).await?;
    let mut consumer = ensure_consumer(&stream).await?;
    let last_sequence =
        stream.info().await.map_err(ProjectorError::nats("reading the stream's info"))?.state.last_sequence;
    let info = consumer.info().await.map_err(ProjectorError::nats("reading the consumer's info"))?.clone();
    let stuck = stuck::reported(&jetstream).await?;
    let pool = connect(&args.database).await?;
    let dead = dead_letters::count(&pool).await?;
    let last_verify = verify::report::last(&pool).await?;
    let rebuild = crate::rebuild::shadow::under_way(&pool).await?;
    let status = serde_json::json!({
        "stream": stream::STREAM,
        "consumer": stream::CONSUMER,
        "lastSequence": last_sequence,
        "ackFloor": info.ack_floor.stream_sequence,
        "pending": info.num_pending,
        "unacknowledged": info.num_ack_pending,
        "deadLetters": dead,
        "stuckBatches": stuck,
        "lastVerify": last_verify,
        "rebuild": rebuild,
    });
    match args.output {
        Output::Json => write_stdout(&format!("{status}\n")),
        Output::Text => write_stdout(&format!(
            "stream {} last sequence {}\nconsumer {} acknowledged through {}\npending (lag) {}, delivered but unacknowledged {}\ndead letters {}\nstuck batches {}\n{}{}{}\n",
            stream::STREAM,
            last_sequence,
            stream::CONSUMER,
            info.ack_floor.stream_sequence,
            info.num_pending,
            info.num_ack_pending,
            dead,
            stuck.len(),
            stuck.iter().map(describe_stuck).collect::<String>(),
            last_verify.map_or_else(|| "no verify recorded".to_owned(), |last| last.describe()),
            rebuild.map_or_else(String::new, |under_way| format!("\n{}", under_way.describe()))
        )),
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
        dead_letters::printable(batch.last_error.as_deref().unwrap_or("its first attempt has not returned"))
    )
}

async fn publish(args: PublishArgs) -> Result<(), ProjectorError> {
    let mut events = Vec::new();
    if args.files.is_empty() {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| ProjectorError::Input { input: "standard input".to_owned(), source })?;
        events.extend(text.lines().filter(|line| !line.trim().is_empty()).map(str::to_owned));
    } else {
        for file in &args.files {
            let text = std::fs::read_to_string(file)
                .map_err(|source| ProjectorError::Input { input: file.display().to_string(), source })?;
            events.push(text);
        }
    }
    // All or nothing: every event is checked before the first is published.
    let events = events
        .into_iter()
        .enumerate()
        .map(|(index, text)| {
            ChangeEvent::decode(text.as_bytes()).map(|event| (event, text)).map_err(|error| {
                ProjectorError::Usage(format!("event {} is not valid, nothing published: {error}", index + 1))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let client = stream::connect_once(&args.nats.nats_url).await?;
    let jetstream = jetstream::new(client);
    ensure_stream(&jetstream, usize::from(args.nats.stream_replicas)).await?;
    let mut published = 0;
    for (event, text) in events {
        let mut headers = async_nats::HeaderMap::new();
        // JetStream stores one copy of a re-published event within its duplicate window.
        headers.insert("Nats-Msg-Id", event.event_id.to_string().as_str());
        jetstream
            .publish_with_headers(event.expected_subject(), headers, text.into_bytes().into())
            .await
            .map_err(ProjectorError::nats("publishing an event"))?
            .await
            .map_err(ProjectorError::nats("awaiting an event's acknowledgement"))?;
        published += 1;
    }
    write_stdout(&format!("published {published} event(s)\n"))
}

fn to_json(value: &impl serde::Serialize) -> Result<String, ProjectorError> {
    serde_json::to_string(value).map_err(ProjectorError::Encoding)
}

fn write_stdout(text: &str) -> Result<(), ProjectorError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).map_err(ProjectorError::Output)
}

#[cfg(test)]
mod tests {
    use super::{publish, NatsArgs, PublishArgs};

    #[tokio::test]
    async fn a_missing_input_file_is_named_as_the_input_that_could_not_be_read() {
        let missing = std::env::temp_dir().join(format!("lectern-no-such-event-{}.json", uuid::Uuid::new_v4()));
        // Nothing listens there; the file is read, and fails, before NATS is dialled.
        let nats = NatsArgs { nats_url: "nats://127.0.0.1:1".to_owned(), stream_replicas: 1 };

        let error = publish(PublishArgs { nats, files: vec![missing.clone()] }).await.expect_err("no such file");

        let text = error.to_string();
        assert!(text.contains(&missing.display().to_string()), "the file is not named: {text}");
        assert!(!text.contains("writing output"), "a failed read is reported as a write: {text}");
        let source = std::error::Error::source(&error).and_then(|source| source.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound), "{error:?}");
    }
}
