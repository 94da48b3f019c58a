//! `lectern-api dev`: the whole local stack in one process, for a newcomer's first
//! five minutes. Migrates, runs the projector, publishes the demo data through NATS
//! as real change events, waits until it is projected, prints a fresh key with a
//! ready curl line, serves; Ctrl-C stops the API and the projector cleanly.
//!
//! Safe to run again: the demo's events have fixed ids, so JetStream keeps one copy
//! and the projector's version guard ignores repeats; each run prints a new key.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_projector::consumer::{self, RunSettings};
use lectern_projector::demo::{self, DemoCounts, DemoOutcome};
use secrecy::ExposeSecret;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::serve::{self, cancel_on_signal};
use super::{database_error, write_stdout};
use crate::config::DevArgs;
use crate::error::CommandError;
use crate::keys::store::{self, NewKey};
use crate::keys::{IssuedKey, Scope};

/// The demo workspace: its data is published by `dev`, its key printed.
pub const DEMO_WORKSPACE: Uuid = demo::DEMO_WORKSPACE;

/// A newcomer should hear within seconds that NATS is missing, not wait on retries.
const NATS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Projecting the demo takes about a second; past this something is wrong, and the
/// API is served anyway so the newcomer can look.
const PROJECTION_WAIT: Duration = Duration::from_secs(60);

pub async fn dev(args: DevArgs) -> Result<(), CommandError> {
    serve::install_metrics_recorder();
    let settings = &args.serve;
    let url = &settings.database.database_url;
    super::migrate(url).await?;
    let nats = connect_nats(&args.nats_url).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));

    let projector_pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(url)
        .map_err(|source| database_error(url, source))?;
    let projector =
        tokio::spawn(consumer::run(nats.clone(), projector_pool, RunSettings::default(), shutdown.child_token()));

    let outcome = demo::publish_demo(&jetstream::new(nats), DEMO_WORKSPACE)
        .await
        .map_err(|source| CommandError::Projector { context: "publishing the demo data", source })?;
    tracing::info!("{outcome}");
    let pool = serve::open_pool(settings)?;
    let expected = demo::expected_active_counts(&demo::demo_events(DEMO_WORKSPACE));
    wait_for_projection(&pool, expected, &shutdown).await;

    let key = issue_demo_key(&pool, settings).await?;
    let bound = serve::bind(settings, pool).await?;
    print_quick_start(bound.api_address(), bound.metrics_address(), &key, &outcome, expected)?;
    let served = bound.run(shutdown.clone()).await;
    shutdown.cancel();
    match projector.await {
        Ok(Ok(())) => tracing::info!("projector stopped"),
        Ok(Err(error)) => tracing::error!(%error, "the projector stopped with an error"),
        Err(error) => tracing::error!(%error, "the projector's task failed"),
    }
    served
}

async fn connect_nats(url: &str) -> Result<async_nats::Client, CommandError> {
    let unreachable = |problem: String| CommandError::Config {
        setting: "--nats-url/NATS_URL",
        problem: format!(
            "cannot connect to NATS at {url} ({problem}); `dev` needs NATS with JetStream (`nats-server -js`) \
             to publish and project the demo data"
        ),
    };
    let connecting = async_nats::ConnectOptions::new().name("lectern-api dev").connect(url);
    match tokio::time::timeout(NATS_CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(unreachable(error.to_string())),
        Err(_) => Err(unreachable(format!("no answer within {NATS_CONNECT_TIMEOUT:?}"))),
    }
}

/// Waits until the read model serves every demo record, so the printed curl shows data.
async fn wait_for_projection(pool: &PgPool, expected: DemoCounts, shutdown: &CancellationToken) {
    let started = Instant::now();
    loop {
        match active_counts(pool).await {
            Ok(counts) if counts.contacts >= expected.contacts && counts.items >= expected.items => {
                tracing::info!(
                    contacts = counts.contacts,
                    items = counts.items,
                    elapsed_ms = started.elapsed().as_millis(),
                    "demo data projected"
                );
                return;
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "counting projected demo records failed; retrying"),
        }
        if started.elapsed() > PROJECTION_WAIT {
            tracing::warn!("the demo data is not fully projected yet; serving anyway (see `lectern-projector status`)");
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

async fn active_counts(pool: &PgPool) -> Result<DemoCounts, sqlx::Error> {
    let (contacts, items): (i64, i64) = sqlx::query_as(
        "select (select count(*) from contacts where workspace_id = $1 and status = 'active'),
                (select count(*) from items where workspace_id = $1 and status = 'active')",
    )
    .bind(DEMO_WORKSPACE)
    .fetch_one(pool)
    .await?;
    Ok(DemoCounts {
        contacts: usize::try_from(contacts).unwrap_or_default(),
        items: usize::try_from(items).unwrap_or_default(),
    })
}

async fn issue_demo_key(pool: &PgPool, settings: &crate::config::ServeArgs) -> Result<IssuedKey, CommandError> {
    let issued = IssuedKey::generate(settings.environment, &settings.secrets.pepper()?);
    let new = NewKey {
        workspace_id: DEMO_WORKSPACE,
        name: Some("lectern-api dev"),
        scopes: &[Scope::ContactsRead, Scope::ItemsRead],
        expires_at: None,
    };
    store::insert(pool, &issued, &new)
        .await
        .map_err(|source| database_error(&settings.database.database_url, source))?;
    Ok(issued)
}

fn print_quick_start(
    api: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    issued: &IssuedKey,
    outcome: &DemoOutcome,
    active: DemoCounts,
) -> Result<(), CommandError> {
    let api = api.map_or_else(|| "<unknown>".to_owned(), |address| address.to_string());
    let metrics = metrics.map_or_else(|| "<unknown>".to_owned(), |address| address.to_string());
    let key = issued.key.expose_secret();
    let demo = match outcome {
        DemoOutcome::Published { .. } => "published now",
        DemoOutcome::AlreadyPublished { .. } => "already published by an earlier run",
    };
    write_stdout(&format!(
        "\nLectern (development mode): API and projector running\n\
         \n  API            http://{api}\
         \n  Reference      http://{api}/docs\
         \n  Operations     http://{metrics}/metrics  /healthz  /readyz\
         \n  Demo workspace {DEMO_WORKSPACE}: {} contacts and {} items ({demo})\n\
         \nFresh demo key (contacts:read, items:read), shown once:\n\n  {key}\n\
         \nTry:\n  curl -s -H 'X-API-Key: {key}' 'http://{api}/v1/contacts?limit=5'\
         \n  curl -s -H 'X-API-Key: {key}' 'http://{api}/v1/items?search=consult'\n\
         \nStop with Ctrl-C.\n",
        active.contacts, active.items
    ))
}
