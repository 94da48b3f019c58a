//! The operations listener both binaries open beside their real work: Prometheus
//! metrics, liveness and readiness, on an address of its own so that none of it is
//! public (the API's public port never serves `/metrics`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use poem::endpoint::make;
use poem::http::StatusCode;
use poem::listener::{Acceptor, TcpAcceptor};
use poem::{Response, Route, Server};

/// Latency buckets (seconds) for every `*_seconds` histogram: a read is expected in
/// a few milliseconds, so the resolution sits there.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Buckets for the projector's batch sizes (events per transaction).
const BATCH_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0];

/// The projector's publish-to-commit histogram, which has buckets of its own.
pub const PUBLISH_TO_COMMIT: &str = "lectern_projector_publish_to_commit_seconds";
/// Its buckets (seconds): from a healthy few milliseconds to the minutes of an outage's
/// backlog, so that an alert on its tail can tell them apart.
const PUBLISH_TO_COMMIT_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// The API's webhook delivery histogram: from first change seen to 2xx, which takes
/// milliseconds when the receiver answers and up to the retry period (three days) when it
/// does not; the latency buckets would put every retried delivery in `+Inf`.
pub const WEBHOOK_DELIVERY: &str = "lectern_api_webhook_delivery_seconds";
const WEBHOOK_DELIVERY_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 21600.0, 86400.0, 259_200.0];

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's Prometheus recorder, installed on first use. Both binaries may run
/// in one process (`lectern-dev`) and tests build many apps, so it is shared;
/// `None` only if another recorder was installed first.
pub fn metrics_handle() -> Option<PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
                .and_then(|builder| {
                    builder.set_buckets_for_metric(Matcher::Suffix("_batch_size".to_owned()), BATCH_BUCKETS)
                })
                // A full name is matched before any suffix.
                .and_then(|builder| {
                    builder
                        .set_buckets_for_metric(Matcher::Full(PUBLISH_TO_COMMIT.to_owned()), PUBLISH_TO_COMMIT_BUCKETS)
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(Matcher::Full(WEBHOOK_DELIVERY.to_owned()), WEBHOOK_DELIVERY_BUCKETS)
                });
            match builder.and_then(PrometheusBuilder::install_recorder) {
                Ok(handle) => Some(handle),
                Err(error) => {
                    tracing::warn!(%error, "cannot install the metrics recorder; /metrics will be empty");
                    None
                }
            }
        })
        .clone()
}

/// Why a process is not ready, one line per problem.
pub type Problems = Vec<String>;
/// What a ready process still wants operators to know: it works, but degraded (say,
/// with a cache bypassed).
pub type Degraded = Vec<String>;
/// A readiness probe: `Ok` when the process can do its work now.
pub type ReadinessCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Degraded, Problems>> + Send>> + Send + Sync>;
/// Refreshes gauges that are read rather than counted (pool usage), before a scrape.
pub type BeforeScrape = Arc<dyn Fn() + Send + Sync>;

/// How long a readiness probe may take before it counts as "not ready": an orchestrator
/// must get an answer, never a hang.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);
/// What a single dependency check inside a readiness probe may take: shorter than the
/// probe's own limit, so the answer can still name the dependency that did not answer.
pub const DEPENDENCY_TIMEOUT: Duration = Duration::from_millis(1_500);

/// Answers a readiness probe: 200 `{"status":"ready"}` (with `degraded` when there is
/// something to know), or 503 with the problems.
pub async fn readiness_response(check: &ReadinessCheck) -> Response {
    let outcome = tokio::time::timeout(READINESS_TIMEOUT, check())
        .await
        .unwrap_or_else(|_| Err(vec![format!("readiness check took longer than {READINESS_TIMEOUT:?}")]));
    let (status, body) = match outcome {
        Ok(degraded) if degraded.is_empty() => (StatusCode::OK, serde_json::json!({ "status": "ready" })),
        Ok(degraded) => (StatusCode::OK, serde_json::json!({ "status": "ready", "degraded": degraded })),
        Err(problems) => {
            (StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({ "status": "not ready", "problems": problems }))
        }
    };
    json(status, &body)
}

/// Answers a readiness probe on a public port: 200 `{"status":"ready"}` or 503
/// `{"status":"not ready"}`, nothing more. The details name tenants (a disabled webhook
/// endpoint's workspace), receivers and database errors; they are for the operations
/// listener, never for an unauthenticated caller.
pub async fn public_readiness_response(check: &ReadinessCheck) -> Response {
    let ready = matches!(tokio::time::timeout(READINESS_TIMEOUT, check()).await, Ok(Ok(_)));
    if ready {
        json(StatusCode::OK, &serde_json::json!({ "status": "ready" }))
    } else {
        json(StatusCode::SERVICE_UNAVAILABLE, &serde_json::json!({ "status": "not ready" }))
    }
}

/// Answers a liveness probe: the process is up and its runtime schedules work.
pub fn liveness_response() -> Response {
    json(StatusCode::OK, &serde_json::json!({ "status": "alive" }))
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .header("cache-control", "no-store")
        .body(body.to_string())
}

/// A bound, not yet running operations listener.
pub struct OperationsServer {
    acceptor: TcpAcceptor,
}

impl OperationsServer {
    /// Binds `listen` (port 0 picks a free port, as tests do).
    pub async fn bind(listen: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        Ok(Self { acceptor: TcpAcceptor::from_tokio(listener)? })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.acceptor.local_addr().first().and_then(|addr| addr.as_socket_addr().copied())
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown` resolves.
    pub async fn run(
        self,
        readiness: ReadinessCheck,
        before_scrape: BeforeScrape,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let handle = metrics_handle();
        let metrics = make(move |_| {
            let handle = handle.clone();
            let before_scrape = before_scrape.clone();
            async move {
                before_scrape();
                let text = handle.map(|handle| {
                    handle.run_upkeep();
                    handle.render()
                });
                Response::builder()
                    .content_type("text/plain; version=0.0.4; charset=utf-8")
                    .body(text.unwrap_or_default())
            }
        });
        let ready = make(move |_| {
            let readiness = readiness.clone();
            async move { readiness_response(&readiness).await }
        });
        let app = Route::new()
            .at("/metrics", metrics)
            .at("/healthz", make(|_| async { liveness_response() }))
            .at("/readyz", ready);
        Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(app, shutdown, Some(Duration::from_secs(1)))
            .await
    }
}
