//! The `lectern-api` command line: `serve`, `dev`, `migrate`, `keys`, `openapi`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use secrecy::ExposeSecret;
use uuid::Uuid;

use crate::config::{DatabaseArgs, SecretArgs, ServeArgs};
use crate::db;
use crate::error::CommandError;
use crate::http::{AppState, Application};
use crate::keys::store::{self, KeySummary, NewKey, Revocation};
use crate::keys::{Authenticator, Environment, IssuedKey, Scope};
use crate::listing::cursor::CursorSigner;

/// Lectern's read API.
#[derive(Debug, Parser)]
#[command(name = "lectern-api", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Serve(ServeArgs),
    /// Development quick start: create and migrate the database, print a fresh demo key, serve.
    Dev(ServeArgs),
    /// Create the database if needed and apply pending migrations.
    Migrate(DatabaseArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print the OpenAPI document (the source of schema/openapi.json).
    Openapi,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key and print it once.
    Create(CreateKeyArgs),
    /// List a workspace's keys (never their secrets).
    List(ListKeysArgs),
    /// Revoke a key; every running API process refuses it within a second.
    Revoke(RevokeKeyArgs),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
struct CreateKeyArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    #[command(flatten)]
    secrets: SecretArgs,
    /// The workspace the key reads.
    #[arg(long)]
    workspace: Uuid,
    /// A scope the key carries; repeat for several.
    #[arg(long = "scope", value_enum, required = true)]
    scopes: Vec<Scope>,
    /// A label for people (which integration holds the key).
    #[arg(long)]
    name: Option<String>,
    /// The deployment the key is for.
    #[arg(long, value_enum, default_value_t = Environment::Live)]
    environment: Environment,
    /// When the key stops working (RFC 3339).
    #[arg(long, value_parser = parse_rfc3339)]
    expires_at: Option<DateTime<Utc>>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
struct ListKeysArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    #[arg(long)]
    workspace: Uuid,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
struct RevokeKeyArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The key id (the part after `lk_<environment>_`).
    id: String,
}

fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|_| "must be an RFC 3339 date-time such as 2027-01-31T00:00:00Z".to_owned())
}

/// Parses the command line (exit 2 on bad usage), runs the command, and prints any
/// failure as one line (exit 1).
pub fn main() -> ExitCode {
    let cli: Cli = lectern_schema::ops::parse_args();
    crate::telemetry::init();
    lectern_schema::ops::run_command(run(cli.command))
}

async fn run(command: Command) -> Result<(), CommandError> {
    match command {
        Command::Serve(args) => serve(args, false).await,
        Command::Dev(args) => serve(args, true).await,
        Command::Migrate(args) => migrate(&args.database_url).await,
        Command::Keys(KeysCommand::Create(args)) => create_key(args).await,
        Command::Keys(KeysCommand::List(args)) => list_keys(args).await,
        Command::Keys(KeysCommand::Revoke(args)) => revoke_key(args).await,
        Command::Openapi => write_stdout(&crate::http::openapi::document()),
    }
}

async fn migrate(url: &str) -> Result<(), CommandError> {
    db::create_and_migrate(url).await.map_err(|source| database_error(url, source))?;
    tracing::info!(database = %db::redacted(url), "migrations applied");
    Ok(())
}

fn database_error(url: &str, source: sqlx::Error) -> CommandError {
    match source {
        sqlx::Error::Migrate(source) => CommandError::Migrate { url: db::redacted(url), source: *source },
        source => CommandError::Database { url: db::redacted(url), source },
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

/// The demo workspace `dev` issues its key for.
pub const DEMO_WORKSPACE: Uuid = Uuid::from_u128(0x6d1f0b7e_3c55_4a3b_8f9f_5d1f0e2a7c11);

async fn serve(args: ServeArgs, development: bool) -> Result<(), CommandError> {
    let url = &args.database.database_url;
    let pepper = args.secrets.pepper()?;
    let cursor_secret = args.secrets.cursor_secret()?;
    let pool = db::lazy_pool(url, &args.pool.settings()).map_err(|source| database_error(url, source))?;
    let demo_key = if development {
        migrate(url).await?;
        let issued = IssuedKey::generate(args.environment, &pepper);
        let new = NewKey {
            workspace_id: DEMO_WORKSPACE,
            name: Some("lectern-api dev"),
            scopes: &[Scope::ContactsRead, Scope::ItemsRead],
            expires_at: None,
        };
        store::insert(&pool, &issued, &new).await.map_err(|source| database_error(url, source))?;
        Some(issued)
    } else {
        if let Err(error) = sqlx::query("select 1").execute(&pool).await {
            tracing::warn!(database = %db::redacted(url), %error, "database not reachable yet; answering 503 until it is");
        }
        None
    };
    let state = AppState {
        authenticator: Arc::new(Authenticator::new(pool.clone(), pepper, args.environment)),
        cursors: CursorSigner::new(cursor_secret, Duration::from_secs(args.cursor_lifetime_secs)),
        pool,
    };
    let application = Application::build(args.listen, state)
        .await
        .map_err(|source| CommandError::Listen { address: args.listen, source })?;
    let address = application.local_addr().unwrap_or(args.listen);
    tracing::info!(%address, environment = args.environment.as_str(), "lectern-api listening");
    if let Some(issued) = demo_key {
        print_quick_start(&address, &issued)?;
    }
    application.run_until_stopped(shutdown_signal()).await.map_err(CommandError::Serve)?;
    tracing::info!("lectern-api stopped");
    Ok(())
}

fn print_quick_start(address: &std::net::SocketAddr, issued: &IssuedKey) -> Result<(), CommandError> {
    let key = issued.key.expose_secret();
    write_stdout(&format!(
        "\nLectern API (development mode) at http://{address}\n\
         Demo workspace: {DEMO_WORKSPACE}\n\
         Fresh demo key (contacts:read, items:read), shown once:\n\n  {key}\n\n\
         Try:\n  curl -s -H 'X-API-Key: {key}' 'http://{address}/v1/contacts?limit=5'\n\n\
         Stop with Ctrl-C.\n"
    ))
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

async fn create_key(args: CreateKeyArgs) -> Result<(), CommandError> {
    let pepper = args.secrets.pepper()?;
    let pool = connect(&args.database).await?;
    let issued = IssuedKey::generate(args.environment, &pepper);
    let new = NewKey {
        workspace_id: args.workspace,
        name: args.name.as_deref(),
        scopes: &args.scopes,
        expires_at: args.expires_at,
    };
    let summary = store::insert(&pool, &issued, &new)
        .await
        .map_err(|source| database_error(&args.database.database_url, source))?;
    let key = issued.key.expose_secret();
    match args.output {
        Output::Json => {
            let json = serde_json::json!({
                "id": summary.id,
                "key": key,
                "workspaceId": summary.workspace_id,
                "name": summary.name,
                "scopes": summary.scopes,
                "environment": summary.environment,
                "createdAt": summary.created_at,
                "expiresAt": summary.expires_at,
            });
            write_stdout(&format!("{json}\n"))
        }
        Output::Text => write_stdout(&format!(
            "API key created. It is shown only this once: store it in a secret manager.\n\n  {key}\n\n{}",
            describe(&summary)
        )),
    }
}

fn describe(key: &KeySummary) -> String {
    let time = |at: Option<DateTime<Utc>>, none: &str| at.map_or_else(|| none.to_owned(), |at| at.to_rfc3339());
    format!(
        "id:           {}\nworkspace:    {}\nname:         {}\nscopes:       {}\nenvironment:  {}\ncreated:      {}\nexpires:      {}\nrevoked:      {}\nlast used:    {}\n",
        key.id,
        key.workspace_id,
        key.name.as_deref().unwrap_or("-"),
        key.scopes.join(", "),
        key.environment,
        key.created_at.to_rfc3339(),
        time(key.expires_at, "never"),
        time(key.revoked_at, "no"),
        time(key.last_used_at, "never"),
    )
}

async fn list_keys(args: ListKeysArgs) -> Result<(), CommandError> {
    let pool = connect(&args.database).await?;
    let keys = store::list(&pool, args.workspace)
        .await
        .map_err(|source| database_error(&args.database.database_url, source))?;
    match args.output {
        Output::Json => {
            let json = serde_json::to_string(&keys).map_err(|error| CommandError::Output(error.into()))?;
            write_stdout(&format!("{json}\n"))
        }
        Output::Text if keys.is_empty() => write_stdout(&format!("No keys for workspace {}.\n", args.workspace)),
        Output::Text => write_stdout(&keys.iter().map(describe).collect::<Vec<_>>().join("\n")),
    }
}

async fn revoke_key(args: RevokeKeyArgs) -> Result<(), CommandError> {
    let pool = connect(&args.database).await?;
    let outcome =
        store::revoke(&pool, &args.id).await.map_err(|source| database_error(&args.database.database_url, source))?;
    match outcome {
        Revocation::Revoked(at) => write_stdout(&format!("Revoked key {} at {}.\n", args.id, at.to_rfc3339())),
        Revocation::AlreadyRevoked(at) => {
            write_stdout(&format!("Key {} was already revoked at {}.\n", args.id, at.to_rfc3339()))
        }
        Revocation::NoSuchKey => Err(CommandError::NoSuchKey(args.id)),
    }
}

fn write_stdout(text: &str) -> Result<(), CommandError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).map_err(CommandError::Output)
}
