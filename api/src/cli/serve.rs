//! `lectern-api serve`: the public API and, on its own address, the operations
//! listener; both stop together on SIGTERM or Ctrl-C after in-flight requests finish.

use std::net::SocketAddr;
use std::sync::Arc;

use lectern_runtime::process::cancel_on_signal;
use lectern_runtime::server::OperationsServer;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::database_error;
use crate::config::ServeArgs;
use crate::error::CommandError;
use crate::http::operations;
use crate::http::{AppState, Application};
use crate::reads;

pub async fn serve(args: ServeArgs) -> Result<(), CommandError> {
    install_metrics_recorder();
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone(), "shutting down: finishing in-flight work"));
    let pool = open_pool(&args)?;
    if let Err(error) = sqlx::query("select 1").execute(&pool).await {
        tracing::warn!(database = %reads::redacted(&args.database.database_url), %error, "database not reachable yet; answering 503 until it is");
    }
    bind(&args, pool).await?.run(shutdown).await
}

/// Metrics recorded before the recorder exists are lost: install it first thing.
pub fn install_metrics_recorder() {
    let _ = lectern_runtime::server::metrics_handle();
}

/// The pool every request borrows from; opened lazily so the API starts while
/// PostgreSQL is still down.
pub fn open_pool(args: &ServeArgs) -> Result<PgPool, CommandError> {
    let url = &args.database.database_url;
    reads::lazy_pool(url, &args.pool.settings()).map_err(|source| database_error(url, source))
}

/// Both listeners bound, not yet serving.
pub struct Bound {
    application: Application,
    /// The configured public address, named when serving fails.
    listen: SocketAddr,
    operations: OperationsServer,
    state: Arc<AppState>,
    max_connections: u32,
}

/// Builds the application state and binds the public and the operations addresses.
pub async fn bind(args: &ServeArgs, pool: PgPool) -> Result<Bound, CommandError> {
    let settings = args.app_settings()?;
    // Fingerprints, never the secrets: they name the series of
    // `lectern_api_previous_cursor_secret_verifications_total` an operator watches.
    let cursor_secret = crate::signing::fingerprint(&settings.cursor_secret);
    let previous_cursor_secrets: Vec<String> =
        settings.previous_cursor_secrets.iter().map(crate::signing::fingerprint).collect();
    let state = AppState::new(pool, settings);
    let application = Application::build(args.listen, state)
        .await
        .map_err(|source| CommandError::Listen { setting: "--listen/LECTERN_LISTEN", address: args.listen, source })?
        .with_limits(args.server_limits());
    let operations = OperationsServer::bind(args.metrics_listen).await.map_err(|source| CommandError::Listen {
        setting: "--metrics-listen/LECTERN_METRICS_LISTEN",
        address: args.metrics_listen,
        source,
    })?;
    tracing::info!(
        address = %address_or(application.local_addr(), args.listen),
        metrics = %address_or(operations.local_addr(), args.metrics_listen),
        environment = args.environment.as_str(),
        cursor_secret,
        previous_cursor_secrets = previous_cursor_secrets.join(","),
        "lectern-api listening"
    );
    let state = application.state();
    Ok(Bound { application, listen: args.listen, operations, state, max_connections: args.pool.db_pool_size })
}

fn address_or(bound: Option<SocketAddr>, configured: SocketAddr) -> SocketAddr {
    bound.unwrap_or(configured)
}

impl Bound {
    pub fn api_address(&self) -> Option<SocketAddr> {
        self.application.local_addr()
    }

    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.operations.local_addr()
    }

    /// Serves until `shutdown` is cancelled; then reports itself not ready on both
    /// listeners while it keeps serving for the shutdown grace, and lets in-flight
    /// requests finish. The operations listener stops last, so that probes see the 503.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), CommandError> {
        let readiness = operations::readiness_check(&self.state);
        let gauges = operations::pool_gauges(self.state.pool.clone(), self.state.reads.clone(), self.max_connections);
        let api_stopped = CancellationToken::new();
        let operations_stop = api_stopped.clone();
        let operations = tokio::spawn(self.operations.run(readiness, gauges, async move {
            operations_stop.cancelled().await;
        }));
        let address = address_or(self.application.local_addr(), self.listen);
        let asked = shutdown.clone();
        let served = self.application.run_until_stopped(async move { asked.cancelled().await }).await;
        api_stopped.cancel();
        shutdown.cancel();
        match operations.await {
            Ok(Err(error)) => tracing::warn!(%error, "the operations listener stopped with an error"),
            Err(error) => tracing::warn!(%error, "the operations listener's task failed"),
            Ok(Ok(())) => {}
        }
        self.state.reads.close_idle().await;
        served.map_err(|source| CommandError::Serve { address, source })?;
        tracing::info!("lectern-api stopped");
        Ok(())
    }
}
