//! The whole local stack in one process, for a newcomer's first five minutes. Migrates, runs the projector, publishes the demo data through NATS
//! as real change events, waits until it is projected, prints a fresh key with a
//! ready curl line, serves; Ctrl-C stops the API and the projector cleanly.
//!
//! Safe to run again: whether to publish is decided by what the read model holds, the
//! demo's events have fixed ids, so JetStream keeps one copy, and the projector's
//! version guard ignores repeats; each run prints a new key.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_api::cli::serve;
use lectern_api::cli::{database_error, migrate, write_stdout};
use lectern_api::config::ServeArgs;
use lectern_api::keys::store::{self, NewKey};
use lectern_api::keys::{IssuedKey, Scope};
use lectern_fixtures::demo::{self, DemoCounts, DEMO_WORKSPACE};
use lectern_projector::daemon::consumer::{self, RunSettings};
use lectern_runtime::process::cancel_on_signal;
use lectern_schema::events::EntityKind;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::DevError;
use crate::publish::{publish_demo, resend_demo, DemoOutcome};

/// A newcomer should hear within seconds that NATS is missing, not wait on retries.
const NATS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Projecting the demo takes about a second; past this something is wrong, and the
/// API is served anyway so the newcomer can look.
const PROJECTION_WAIT: Duration = Duration::from_secs(60);

/// Everything the stack needs: the API's settings and where NATS is.
#[derive(Clone, Debug, clap::Args)]
pub struct StackArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// NATS server (with JetStream) the in-process projector consumes and the demo publishes to.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
}

/// Runs the stack until Ctrl-C or SIGTERM.
pub async fn run(args: StackArgs) -> Result<(), DevError> {
    serve::install_metrics_recorder();
    let mut settings = args.serve.clone();
    // One process on a newcomer's machine, behind no load balancer: Ctrl-C stops it at once.
    settings.shutdown_grace_ms.get_or_insert(0);
    // A newcomer's first webhook receiver listens on this machine, over plain http.
    settings.webhooks.targets.allow_private_targets = true;
    let settings = &settings;
    let url = &settings.database.database_url;
    migrate(url).await?;
    let nats = connect_nats(&args.nats_url).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone(), "shutting down: finishing in-flight work"));

    let projector_pool = consumer::pool(url).map_err(|source| database_error(url, source))?;
    let projector =
        tokio::spawn(consumer::run(nats.clone(), projector_pool, RunSettings::default(), shutdown.child_token()));

    let pool = serve::open_pool(settings)?;
    let events = demo::demo_events(DEMO_WORKSPACE);
    let (final_versions, active) = (FinalVersions::of(&events), demo::expected_active_counts(&events));
    let demo = publish_unless_projected(&pool, &jetstream::new(nats), &final_versions).await?;
    wait_for_projection(&pool, &final_versions, &shutdown).await;

    let key = issue_demo_key(&pool, settings).await?;
    let bound = serve::bind(settings, pool).await?;
    print_quick_start(bound.api_address(), bound.metrics_address(), &key, demo, active)?;
    let served = bound.run(shutdown.clone()).await;
    shutdown.cancel();
    match projector.await {
        Ok(Ok(())) => tracing::info!("projector stopped"),
        Ok(Err(error)) => tracing::error!(%error, "the projector stopped with an error"),
        Err(error) => tracing::error!(%error, "the projector's task failed"),
    }
    Ok(served?)
}

/// A client of the NATS at `url`; a newcomer hears at once when it is missing.
pub async fn connect_nats(url: &str) -> Result<async_nats::Client, DevError> {
    let unreachable = |source: Box<dyn std::error::Error + Send + Sync>| DevError::Connect {
        url: lectern_runtime::nats_servers_without_credentials(url),
        source,
    };
    // The same list the projector takes: one server, or several of a cluster, comma-separated.
    let servers = lectern_projector::stream::servers(url).map_err(DevError::NatsUrl)?;
    let connecting = async_nats::ConnectOptions::new().name("lectern-dev").connect(servers);
    match tokio::time::timeout(NATS_CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(unreachable(error.into())),
        Err(elapsed) => Err(unreachable(elapsed.into())),
    }
}

/// How the demo came to be in the read model, as the quick start reports it.
#[derive(Clone, Copy)]
enum Demo {
    Published,
    /// The read model already held it: nothing was sent.
    AlreadyProjected,
    /// The stream held it but the read model did not (its database was reset while
    /// NATS kept the stream and the consumer's acknowledgements), so it was sent again.
    Resent,
}

/// Decides from the read model, not the stream, whether the demo must be sent: the
/// durable consumer never redelivers what it acknowledged, so a database reset under
/// a kept stream would otherwise leave the demo workspace empty.
async fn publish_unless_projected(
    pool: &PgPool,
    jetstream: &jetstream::Context,
    final_versions: &FinalVersions,
) -> Result<Demo, DevError> {
    if projected(pool, final_versions).await.unwrap_or(false) {
        tracing::info!("the read model already holds the demo data; nothing to publish");
        return Ok(Demo::AlreadyProjected);
    }
    let outcome = publish_demo(jetstream, DEMO_WORKSPACE).await?;
    if let DemoOutcome::AlreadyPublished { .. } = outcome {
        tracing::info!(
            "the stream holds the demo data but the read model does not (a reset database?); sending it again"
        );
        resend_demo(jetstream, DEMO_WORKSPACE).await?;
        return Ok(Demo::Resent);
    }
    tracing::info!("{outcome}");
    Ok(Demo::Published)
}

/// Each demo record's final version, as the arrays the check binds: built once, as
/// the check runs every 100 ms while waiting.
struct FinalVersions {
    contacts: (Vec<Uuid>, Vec<i64>),
    items: (Vec<Uuid>, Vec<i64>),
}

impl FinalVersions {
    fn records(&self) -> usize {
        self.contacts.0.len() + self.items.0.len()
    }

    fn of(events: &[demo::DemoEvent]) -> Self {
        let mut built = Self { contacts: (Vec::new(), Vec::new()), items: (Vec::new(), Vec::new()) };
        for ((entity, id), version) in demo::final_versions(events) {
            let (ids, versions) = match entity {
                EntityKind::Contact => &mut built.contacts,
                EntityKind::Item => &mut built.items,
            };
            ids.push(id);
            versions.push(version);
        }
        built
    }
}

/// Waits until the read model holds every demo record at its final version, so the
/// printed curl shows data.
async fn wait_for_projection(pool: &PgPool, final_versions: &FinalVersions, shutdown: &CancellationToken) {
    let started = Instant::now();
    loop {
        match projected(pool, final_versions).await {
            Ok(true) => {
                tracing::info!(elapsed_ms = started.elapsed().as_millis(), "demo data projected");
                return;
            }
            Ok(false) => {}
            Err(error) => tracing::debug!(%error, "checking the projected demo records failed; retrying"),
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

/// Whether every demo record is stored at (at least) its final version. Gives up on a
/// lock after a second (an operator's maintenance, a stuck migration) rather than
/// wait behind it: the answer is then "not yet", and publishing is harmless.
async fn projected(pool: &PgPool, final_versions: &FinalVersions) -> Result<bool, sqlx::Error> {
    let FinalVersions { contacts, items } = final_versions;
    let mut transaction = pool.begin().await?;
    sqlx::query("set local lock_timeout = '1s'").execute(&mut *transaction).await?;
    let reached: i64 = sqlx::query_scalar(
        "select (select count(*) from contacts c join unnest($2::uuid[], $3::bigint[]) f(id, version)
                   on c.id = f.id and c.version >= f.version where c.workspace_id = $1)
              + (select count(*) from items i join unnest($4::uuid[], $5::bigint[]) f(id, version)
                   on i.id = f.id and i.version >= f.version where i.workspace_id = $1)",
    )
    .bind(DEMO_WORKSPACE)
    .bind(&contacts.0)
    .bind(&contacts.1)
    .bind(&items.0)
    .bind(&items.1)
    .fetch_one(&mut *transaction)
    .await?;
    transaction.commit().await?;
    Ok(usize::try_from(reached).is_ok_and(|reached| reached == final_versions.records()))
}

async fn issue_demo_key(pool: &PgPool, settings: &ServeArgs) -> Result<IssuedKey, DevError> {
    let issued = IssuedKey::generate(settings.environment, &settings.secrets.pepper()?);
    let new = NewKey {
        workspace_id: DEMO_WORKSPACE,
        name: Some("lectern-dev"),
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
    demo: Demo,
    active: DemoCounts,
) -> Result<(), DevError> {
    let api = api.map_or_else(|| "<unknown>".to_owned(), |address| address.to_string());
    let metrics = metrics.map_or_else(|| "<unknown>".to_owned(), |address| address.to_string());
    let key = issued.key.expose_secret();
    let demo = match demo {
        Demo::Published => "published now",
        Demo::AlreadyProjected => "already published by an earlier run",
        Demo::Resent => "published again: the read model did not have it",
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
         \nWebhooks: to have a local receiver told whenever the demo workspace's contacts change\
         \n(private targets are allowed in development mode):\
         \n  cargo run -q -p lectern-api -- webhooks create --workspace {DEMO_WORKSPACE} \\\
         \n      --url http://127.0.0.1:9000/hooks --resource contacts --webhooks-allow-private-targets\
         \nIt prints the signing secret once (see docs/api.md, Webhooks).\n\
         \nStop with Ctrl-C.\n",
        active.contacts, active.items
    ))?;
    Ok(())
}
