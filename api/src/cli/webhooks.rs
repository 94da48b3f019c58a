//! `lectern-api webhooks …`: registering the endpoints `serve` delivers to, and reading
//! their delivery log. The HTTP API stays read-only: endpoints are the operator's, like keys.

use std::time::Duration;

use secrecy::ExposeSecret;
use uuid::Uuid;

use super::keys::Output;
use super::{connect, database_error, write_stdout};
use crate::config::{DatabaseArgs, SecretArgs, WebhookTargetArgs};
use crate::error::CommandError;
use crate::keys::PepperDependency;
use crate::webhooks::store::{self, DeliverySummary, EndpointSummary, Redelivery, RotateError};
use crate::webhooks::Resource;

#[derive(Debug, clap::Subcommand)]
pub enum WebhooksCommand {
    /// Register an endpoint and print its id and signing secret (shown once).
    Create(CreateArgs),
    /// List endpoints (never their secrets), with their state and pending deliveries.
    List(ListArgs),
    /// Stop delivering to an endpoint (changes meanwhile are announced once it is enabled).
    Disable(DisableArgs),
    /// Deliver to an endpoint again, also one disabled after its deliveries failed.
    Enable(EndpointArgs),
    /// Give an endpoint a new signing secret; the old one keeps signing beside it for the overlap.
    RotateSecret(RotateArgs),
    /// Delete an endpoint and its delivery log.
    Delete(EndpointArgs),
    /// An endpoint's latest deliveries, newest first.
    Deliveries(DeliveriesArgs),
    /// Send a delivery again now, with the same webhook-id.
    Redeliver(RedeliverArgs),
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The pepper the secret is sealed under (the API's --key-pepper).
    #[command(flatten)]
    secrets: SecretArgs,
    #[command(flatten)]
    targets: WebhookTargetArgs,
    /// The workspace whose changes are announced.
    #[arg(long)]
    workspace: Uuid,
    /// Where deliveries are POSTed (https; see --webhooks-allow-private-targets).
    #[arg(long)]
    url: String,
    /// A resource whose changes are announced; repeat for both.
    #[arg(long = "resource", value_enum, required = true)]
    resources: Vec<Resource>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The API's peppers: each endpoint is shown with the one its secrets are sealed under.
    #[command(flatten)]
    secrets: SecretArgs,
    /// Only this workspace's endpoints.
    #[arg(long)]
    workspace: Option<Uuid>,
    /// Only the endpoints whose secrets are sealed under this pepper; repeat for several.
    #[arg(long = "pepper", value_enum)]
    peppers: Vec<PepperDependency>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// An endpoint as `webhooks list` shows it: its summary and the pepper its secrets depend on.
#[derive(serde::Serialize)]
struct ListedEndpoint<'a> {
    #[serde(flatten)]
    summary: &'a EndpointSummary,
    pepper: PepperDependency,
}

#[derive(Debug, clap::Args)]
pub struct EndpointArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The endpoint's id.
    id: Uuid,
}

#[derive(Debug, clap::Args)]
pub struct DisableArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The endpoint's id.
    id: Uuid,
    /// Why, as `list` will show it.
    #[arg(long, default_value = "disabled by the operator")]
    reason: String,
}

#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    #[command(flatten)]
    secrets: SecretArgs,
    /// The endpoint's id.
    id: Uuid,
    /// Hours the old secret keeps signing beside the new one (each delivery carries both
    /// signatures), so the receiver can switch without refusing a delivery.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(0..=720))]
    overlap_hours: u64,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
pub struct DeliveriesArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The endpoint's id.
    id: Uuid,
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i64).range(1..=1_000))]
    limit: i64,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
pub struct RedeliverArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The delivery's id (its webhook-id, `msg_…`).
    id: String,
}

/// Runs one `webhooks` subcommand.
pub async fn run(command: WebhooksCommand) -> Result<(), CommandError> {
    match command {
        WebhooksCommand::Create(args) => create(args).await,
        WebhooksCommand::List(args) => list(args).await,
        WebhooksCommand::Disable(args) => {
            let pool = connect(&args.database).await?;
            let found = store::set_endpoint_enabled(&pool, args.id, Some(&args.reason))
                .await
                .map_err(|source| database_error(&args.database.database_url, source))?;
            found_or(found, args.id, "disabled: no delivery is made until it is enabled")
        }
        WebhooksCommand::Enable(args) => {
            let pool = connect(&args.database).await?;
            let found = store::set_endpoint_enabled(&pool, args.id, None)
                .await
                .map_err(|source| database_error(&args.database.database_url, source))?;
            found_or(found, args.id, "enabled: changes it was not told about are announced within seconds")
        }
        WebhooksCommand::RotateSecret(args) => rotate(args).await,
        WebhooksCommand::Delete(args) => {
            let pool = connect(&args.database).await?;
            let found = store::delete_endpoint(&pool, args.id)
                .await
                .map_err(|source| database_error(&args.database.database_url, source))?;
            found_or(found, args.id, "deleted, with its delivery log")
        }
        WebhooksCommand::Deliveries(args) => deliveries(args).await,
        WebhooksCommand::Redeliver(args) => {
            let pool = connect(&args.database).await?;
            match store::redeliver(&pool, &args.id)
                .await
                .map_err(|source| database_error(&args.database.database_url, source))?
            {
                Redelivery::Scheduled => write_stdout(&format!("Delivery {} is pending again, due now.\n", args.id)),
                Redelivery::NoSuchDelivery => Err(CommandError::NoSuchDelivery(args.id)),
                Redelivery::AlreadyPending(pending) => Err(CommandError::DeliveryPending { pending }),
            }
        }
    }
}

fn found_or(found: bool, id: Uuid, done: &str) -> Result<(), CommandError> {
    if found {
        write_stdout(&format!("Webhook endpoint {id} {done}.\n"))
    } else {
        Err(CommandError::NoSuchEndpoint(id))
    }
}

async fn create(args: CreateArgs) -> Result<(), CommandError> {
    let peppers = args.secrets.peppers()?;
    let url = args
        .targets
        .policy()
        .check(&args.url)
        .await
        .map_err(|error| CommandError::Refused { what: "refused webhook URL", source: Box::new(error) })?;
    let pool = connect(&args.database).await?;
    let (id, secret) = store::create_endpoint(&pool, &peppers, args.workspace, url.as_str(), &args.resources)
        .await
        .map_err(|source| database_error(&args.database.database_url, source))?;
    let resources: Vec<&str> = args.resources.iter().map(|resource| resource.as_str()).collect();
    match args.output {
        Output::Json => {
            let json = serde_json::json!({
                "id": id,
                "secret": secret.expose_secret(),
                "workspaceId": args.workspace,
                "url": url.as_str(),
                "resources": resources,
            });
            write_stdout(&format!("{json}\n"))
        }
        Output::Text => write_stdout(&format!(
            "Webhook endpoint created. Its signing secret is shown only this once: give it to the receiver, which \
             verifies every delivery with it (Standard Webhooks).\n\n  {}\n\nid:           {id}\nworkspace:    {}\n\
             url:          {}\nresources:    {}\n",
            secret.expose_secret(),
            args.workspace,
            url.as_str(),
            resources.join(", "),
        )),
    }
}

async fn list(args: ListArgs) -> Result<(), CommandError> {
    let peppers = args.secrets.peppers()?;
    let pool = connect(&args.database).await?;
    let endpoints = store::list_endpoints(&pool, args.workspace)
        .await
        .map_err(|source| database_error(&args.database.database_url, source))?;
    let listed: Vec<ListedEndpoint<'_>> = endpoints
        .iter()
        .map(|summary| ListedEndpoint { summary, pepper: peppers.dependency(Some(&summary.pepper_fingerprint)) })
        .filter(|endpoint| args.peppers.is_empty() || args.peppers.contains(&endpoint.pepper))
        .collect();
    match args.output {
        Output::Json => write_stdout(&format!("{}\n", serde_json::to_string(&listed).map_err(CommandError::Encoding)?)),
        Output::Text if listed.is_empty() => write_stdout(&format!(
            "No webhook endpoints{}.\n",
            if args.peppers.is_empty() { "" } else { " sealed under the peppers asked for" }
        )),
        Output::Text => write_stdout(&listed.iter().map(describe_endpoint).collect::<Vec<_>>().join("\n")),
    }
}

/// What `webhooks list` says of the pepper an endpoint's secrets are sealed under.
fn pepper_text(dependency: PepperDependency) -> &'static str {
    match dependency {
        PepperDependency::Current => "current",
        PepperDependency::Previous => {
            "previous (one of the previous peppers; sealed again under the current one by the next look of the \
             process delivering for it, within a minute)"
        }
        // Every endpoint records its pepper; kept for the shared type.
        PepperDependency::Unrecorded => "unrecorded",
        PepperDependency::Unknown => {
            "unknown (neither the current pepper nor a previous one: an API with these peppers cannot sign for it)"
        }
    }
}

fn describe_endpoint(listed: &ListedEndpoint<'_>) -> String {
    let endpoint = listed.summary;
    let state = match (&endpoint.disabled_by, &endpoint.disabled_reason) {
        (None, _) => "enabled".to_owned(),
        (Some(by), reason) => format!("disabled by {by}: {}", reason.as_deref().unwrap_or("-")),
    };
    let time = |at: Option<chrono::DateTime<chrono::Utc>>, none: &str| {
        at.map_or_else(|| none.to_owned(), |at| at.to_rfc3339())
    };
    format!(
        "id:           {}\nworkspace:    {}\nurl:          {}\nresources:    {}\nstate:        {state}\n\
         pending:      {}\nlast 2xx:     {}\nold secret:   {}\npepper:       {}\ncreated:      {}\n",
        endpoint.id,
        endpoint.workspace_id,
        endpoint.url,
        endpoint.resources.join(", "),
        endpoint.pending,
        time(endpoint.last_delivered_at, "never"),
        endpoint
            .previous_secret_until
            .map_or_else(|| "none".to_owned(), |until| format!("signs until {}", until.to_rfc3339())),
        pepper_text(listed.pepper),
        endpoint.created_at.to_rfc3339(),
    )
}

async fn rotate(args: RotateArgs) -> Result<(), CommandError> {
    let peppers = args.secrets.peppers()?;
    let pool = connect(&args.database).await?;
    let overlap = Duration::from_secs(args.overlap_hours * 3600);
    let secret = match store::rotate_secret(&pool, &peppers, args.id, overlap).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(CommandError::NoSuchEndpoint(args.id)),
        Err(RotateError::Database(source)) => return Err(database_error(&args.database.database_url, source)),
        Err(RotateError::Secret(error)) => {
            return Err(CommandError::Refused { what: "webhook signing secret", source: Box::new(error) })
        }
    };
    match args.output {
        Output::Json => write_stdout(&format!(
            "{}\n",
            serde_json::json!({ "id": args.id, "secret": secret.expose_secret(), "overlapHours": args.overlap_hours })
        )),
        Output::Text => write_stdout(&format!(
            "New signing secret for webhook endpoint {}, shown only this once:\n\n  {}\n\nThe old secret keeps \
             signing beside it for {} h (each delivery carries both signatures).\n",
            args.id,
            secret.expose_secret(),
            args.overlap_hours
        )),
    }
}

async fn deliveries(args: DeliveriesArgs) -> Result<(), CommandError> {
    let pool = connect(&args.database).await?;
    let deliveries = store::latest_deliveries(&pool, args.id, args.limit)
        .await
        .map_err(|source| database_error(&args.database.database_url, source))?;
    match args.output {
        Output::Json => {
            write_stdout(&format!("{}\n", serde_json::to_string(&deliveries).map_err(CommandError::Encoding)?))
        }
        Output::Text if deliveries.is_empty() => write_stdout("No deliveries.\n"),
        Output::Text => write_stdout(&deliveries.iter().map(describe_delivery).collect::<Vec<_>>().join("")),
    }
}

fn describe_delivery(delivery: &DeliverySummary) -> String {
    let outcome = match (&delivery.last_status, &delivery.last_error) {
        (Some(status), None) => format!("answered {status}"),
        (_, Some(error)) => error.clone(),
        (None, None) => "not attempted yet".to_owned(),
    };
    format!(
        "{}  {}  {:9}  attempts {}  {}  {}\n",
        delivery.created_at.to_rfc3339(),
        delivery.id,
        delivery.state,
        delivery.attempts,
        delivery.resource,
        outcome
    )
}
