//! The `lectern-api` command line: `serve`, `migrate`, `keys`, `webhooks`, `healthcheck`, `openapi`.

mod keys;
pub mod serve;
mod webhooks;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::config::{DatabaseArgs, ServeArgs};
use crate::error::CommandError;
use crate::reads;

/// Lectern's read API.
#[derive(Debug, Parser)]
#[command(name = "lectern-api", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API (and the operations listener: /metrics, /healthz, /readyz).
    Serve(ServeArgs),
    /// Create the database if needed and apply pending migrations.
    Migrate(DatabaseArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Manage the webhook endpoints `serve` delivers to, and their deliveries.
    #[command(subcommand)]
    Webhooks(webhooks::WebhooksCommand),
    /// Exit 0 if the URL answers 200 (a container health check that needs no curl).
    Healthcheck(HealthcheckArgs),
    /// Print the OpenAPI document (the source of schema/openapi.json).
    Openapi,
}

#[derive(Debug, clap::Args)]
struct HealthcheckArgs {
    /// What to probe (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:8080/readyz")]
    url: String,
}

/// Parses the command line (exit 2 on bad usage), runs the command, and prints any
/// failure as one line (exit 1).
/// The command line as clap describes it: every command, flag, variable and default (the
/// tests hold the operations guide to it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

pub fn main() -> ExitCode {
    let cli: Cli = lectern_runtime::parse_args();
    crate::telemetry::init();
    crate::memory::keep_heap_in_small_pages();
    lectern_runtime::run_command_idling(
        run(cli.command),
        lectern_allocator::hand_back_freed_memory,
        lectern_allocator::AT_MOST_EVERY,
    )
}

async fn run(command: Command) -> Result<(), CommandError> {
    match command {
        Command::Serve(args) => serve::serve(args).await,
        Command::Migrate(args) => migrate(&args.database_url).await,
        Command::Keys(command) => keys::run(command).await,
        Command::Webhooks(command) => webhooks::run(command).await,
        Command::Healthcheck(args) => lectern_runtime::probe::probe(&args.url).await.map_err(CommandError::Unhealthy),
        Command::Openapi => write_stdout(&crate::http::openapi::document()),
    }
}

/// Creates the database if needed and applies pending migrations.
pub async fn migrate(url: &str) -> Result<(), CommandError> {
    reads::create_and_migrate(url).await.map_err(|source| database_error(url, source))?;
    tracing::info!(database = %reads::redacted(url), "migrations applied");
    Ok(())
}

/// `source` as the command error of the database at `url` (shown redacted).
pub fn database_error(url: &str, source: sqlx::Error) -> CommandError {
    match source {
        sqlx::Error::Migrate(source) => CommandError::Migrate { url: reads::redacted(url), source: *source },
        source => CommandError::Database { url: reads::redacted(url), source },
    }
}

async fn connect(args: &DatabaseArgs) -> Result<sqlx::PgPool, CommandError> {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&args.database_url)
        .await
        .map_err(|source| database_error(&args.database_url, source))
}

/// Writes `text` to stdout, flushed: a command's output.
pub fn write_stdout(text: &str) -> Result<(), CommandError> {
    lectern_runtime::process::write_stdout(text).map_err(CommandError::Output)
}
