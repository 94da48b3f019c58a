//! The `lectern-projector` command line: the arguments of every command, and `run`'s
//! wiring; each other command's work in a file of its own.
//!
//! # Layout
//! - [`status`]: what `status` prints.
//! - [`publish`]: events checked and published (`publish`).
//! - [`dead_letters`]: the dead letters as `dead-letters list | retry | discard` show them.
//! - [`lost_events`]: the lost events as `lost-events list | accept` show them.

mod dead_letters;
mod lost_events;
mod publish;
mod status;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lectern_runtime::process::cancel_on_signal;
use lectern_runtime::server::OperationsServer;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::daemon::consumer::{self, RunSettings};
use crate::daemon::operations;
use crate::daemon::stuck;
use crate::daemon::workspace_indexes::OwnIndexSettings;
use crate::error::ProjectorError;
use crate::repair::verify::{self, VerifyOptions};
use crate::stream;

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
    /// Inspect, retry and discard messages that broke the contract.
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
    /// List acknowledged events the database lost and the stream no longer holds, and
    /// accept them once dealt with.
    #[command(subcommand)]
    LostEvents(LostEventsCommand),
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
    /// Remove a dead letter without applying it, or every one a newer version of its
    /// record replaced.
    Discard {
        #[command(flatten)]
        database: DatabaseArgs,
        /// The dead letter to discard.
        #[arg(required_unless_present = "superseded", conflicts_with = "superseded")]
        id: Option<i64>,
        /// Discard every letter whose record the read model holds at the letter's version
        /// or later (a corrected event replaced it).
        #[arg(long)]
        superseded: bool,
    },
}

#[derive(Debug, Subcommand)]
enum LostEventsCommand {
    /// List lost events, newest first.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Mark every lost event as dealt with (published again from the upstream's outbox,
    /// or the loss accepted): readiness is no longer degraded by them.
    Accept {
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Debug, Args)]
struct PublishArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// Files with one JSON event each; without files, JSON events one per line on stdin.
    files: Vec<std::path::PathBuf>,
}

/// The command line as clap describes it: every command, flag, variable and default (the
/// tests hold the operations guide to it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
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
        Command::Status(args) => status::status(args).await,
        Command::Verify(args) => verify(args).await.map(drop),
        Command::Rebuild(args) => rebuild(args).await,
        Command::DeadLetters(DeadLettersCommand::List { database, output }) => {
            dead_letters::list(&connect(&database).await?, output).await
        }
        Command::DeadLetters(DeadLettersCommand::Retry { database, id, all }) => {
            dead_letters::retry(&connect(&database).await?, id, all).await
        }
        Command::DeadLetters(DeadLettersCommand::Discard { database, id, superseded }) => {
            dead_letters::discard(&connect(&database).await?, id, superseded).await
        }
        Command::LostEvents(LostEventsCommand::List { database, output }) => {
            lost_events::list(&connect(&database).await?, output).await
        }
        Command::LostEvents(LostEventsCommand::Accept { database }) => {
            lost_events::accept(&connect(&database).await?).await
        }
        Command::Publish(args) => publish::publish(args).await,
        Command::Healthcheck(args) => lectern_runtime::probe::probe(&args.url).await.map_err(ProjectorError::Unhealthy),
    }
}

async fn connect(args: &DatabaseArgs) -> Result<PgPool, ProjectorError> {
    Ok(consumer::pool(&args.database_url)?)
}

async fn run_projector(args: RunArgs) -> Result<(), ProjectorError> {
    // Metrics recorded before the recorder exists are lost: install it first thing.
    let _ = lectern_runtime::server::metrics_handle();
    crate::metrics::start_at_zero();
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
    tokio::spawn(cancel_on_signal(shutdown.clone(), "shutting down: finishing the batch in hand"));
    let stopped = shutdown.clone();
    let watched = operations::Watched {
        batches: stuck::Batches::new(std::time::Duration::from_secs(args.stuck_after)),
        ..operations::Watched::default()
    };
    let operations_task = tokio::spawn(operations_server.run(
        operations::readiness_check(client.clone(), pool.clone(), watched.batches.clone()),
        operations::before_scrape(watched.clone()),
        async move { stopped.cancelled().await },
    ));
    tokio::spawn(operations::export_from_the_database(pool.clone(), shutdown.clone()));
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
    let consumed = consumer::run_watched(client, pool, settings, watched, shutdown.clone()).await;
    shutdown.cancel();
    if let Ok(Err(error)) = operations_task.await {
        tracing::warn!(%error, "the operations listener stopped with an error");
    }
    consumed
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
    let rebuilt = crate::repair::rebuild::rebuild(client, &args.database.database_url, args.force).await?;
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

fn to_json(value: &impl serde::Serialize) -> Result<String, ProjectorError> {
    serde_json::to_string(value).map_err(ProjectorError::Encoding)
}

fn write_stdout(text: &str) -> Result<(), ProjectorError> {
    lectern_runtime::process::write_stdout(text).map_err(ProjectorError::Output)
}
