//! `lectern-api keys create|list|revoke`: issuing and withdrawing API keys.

use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use uuid::Uuid;

use super::{connect, database_error, write_stdout};
use crate::config::{DatabaseArgs, SecretArgs};
use crate::error::CommandError;
use crate::keys::store::{self, KeySummary, NewKey, Revocation};
use crate::keys::{Environment, IssuedKey, PepperDependency, Scope};

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it once.
    Create(CreateKeyArgs),
    /// List a workspace's keys, or every workspace's (never their secrets), each with the
    /// pepper its hash depends on.
    List(ListKeysArgs),
    /// Revoke a key; every running API process refuses it within a second.
    Revoke(RevokeKeyArgs),
}

/// Runs one `keys` subcommand.
pub async fn run(command: KeysCommand) -> Result<(), CommandError> {
    match command {
        KeysCommand::Create(args) => create_key(args).await,
        KeysCommand::List(args) => list_keys(args).await,
        KeysCommand::Revoke(args) => revoke_key(args).await,
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct CreateKeyArgs {
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
pub struct ListKeysArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The API's peppers: each key is shown with the one its hash depends on.
    #[command(flatten)]
    secrets: SecretArgs,
    /// The workspace whose keys to list (default: every workspace).
    #[arg(long)]
    workspace: Option<Uuid>,
    /// Only the keys whose hash depends on this pepper; repeat for several.
    #[arg(long = "pepper", value_enum)]
    peppers: Vec<PepperDependency>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// A key as `keys list` shows it: its summary and the pepper it depends on.
#[derive(serde::Serialize)]
struct ListedKey<'a> {
    #[serde(flatten)]
    summary: &'a KeySummary,
    pepper: PepperDependency,
}

#[derive(Debug, clap::Args)]
pub struct RevokeKeyArgs {
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
    let peppers = args.secrets.peppers()?;
    let pool = connect(&args.database).await?;
    let keys = store::list(&pool, args.workspace)
        .await
        .map_err(|source| database_error(&args.database.database_url, source))?;
    let listed: Vec<ListedKey<'_>> = keys
        .iter()
        .map(|summary| ListedKey { summary, pepper: peppers.dependency(summary.pepper_fingerprint.as_deref()) })
        .filter(|key| args.peppers.is_empty() || args.peppers.contains(&key.pepper))
        .collect();
    match args.output {
        Output::Json => {
            let json = serde_json::to_string(&listed).map_err(CommandError::Encoding)?;
            write_stdout(&format!("{json}\n"))
        }
        Output::Text if listed.is_empty() => write_stdout(&format!(
            "No keys{}{}.\n",
            args.workspace.map_or_else(String::new, |workspace| format!(" for workspace {workspace}")),
            if args.peppers.is_empty() { "" } else { " depending on the peppers asked for" },
        )),
        Output::Text => write_stdout(
            &listed
                .iter()
                .map(|key| format!("{}pepper:       {}\n", describe(key.summary), pepper_text(key.pepper)))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    }
}

/// What `keys list` says of the pepper a key depends on: the JSON output's value first.
fn pepper_text(dependency: PepperDependency) -> &'static str {
    match dependency {
        PepperDependency::Current => "current",
        PepperDependency::Previous => {
            "previous (one of the previous peppers; hashed again under the current one at its next use)"
        }
        PepperDependency::Unrecorded => {
            "unrecorded (made before peppers were recorded and not used since; recorded at its next use)"
        }
        PepperDependency::Unknown => {
            "unknown (neither the current pepper nor a previous one: an API with these peppers refuses it)"
        }
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
