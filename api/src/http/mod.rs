//! The HTTP application: routes, the envelope layer around them, and the server.

mod auth;
mod caller;
mod changes;
mod collection;
mod compression;
pub mod contacts;
pub mod envelope;
pub mod items;
pub mod openapi;
pub mod payload;
pub mod request_id;
pub mod server;
mod state;
pub mod strict_query;

use std::future::Future;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use lectern_runtime::server::{liveness_response, readiness_response};
use poem::endpoint::{make, make_sync};
use poem::web::Html;
use poem::{Endpoint, EndpointExt, Route};
use poem_openapi::registry::MetaSchema;
use uuid::Uuid;

use crate::db::notifications::{self, Invalidated};
use crate::error::ApiError;
use crate::listing::params::query_param_type;
pub use server::ServerLimits;
pub use state::{AppSettings, AppState};

/// A record id as it arrives in a path, checked by [`RecordId::parse`].
///
/// poem-openapi reports path parse failures under its internal route name
/// (`param0`), so the UUID check happens here, where the error can name `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordId(String);

impl RecordId {
    pub fn parse(&self) -> Result<Uuid, ApiError> {
        Uuid::try_parse(&self.0).map_err(|_| ApiError::invalid("id", "must be a UUID"))
    }
}

impl FromStr for RecordId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Ok(Self(text.to_owned()))
    }
}

query_param_type!(RecordId, "RecordId", MetaSchema::new_with_format("string", "uuid"), |id: &RecordId| {
    serde_json::Value::String(id.0.clone())
});

/// The whole HTTP surface, every response passing through the envelope layer, and
/// compressed (br, gzip) for clients that accept it.
pub fn app(state: Arc<AppState>) -> impl Endpoint {
    let document = openapi::document();
    let reference = openapi::reference_page(&document);
    let readiness =
        crate::operations::readiness_check(state.pool.clone(), state.change_listener.clone(), state.reads.clone());
    Route::new()
        .at(
            "/v1/openapi.json",
            make_sync(move |_| {
                poem::Response::builder().content_type("application/json; charset=utf-8").body(document.clone())
            }),
        )
        .nest_no_strip("/v1", openapi::service())
        .at("/docs", make_sync(move |_| Html(reference.clone())))
        .at("/healthz", make_sync(|_| liveness_response()))
        .at(
            "/readyz",
            make(move |_| {
                let readiness = readiness.clone();
                async move { readiness_response(&readiness).await }
            }),
        )
        .data(state)
        .around(envelope::envelope)
        .around(compression::compress)
}

/// A bound, not yet running server (zero2prod's shape: build, inspect the port, run).
pub struct Application {
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    limits: ServerLimits,
}

impl Application {
    /// Binds `listen` (port 0 picks a free port, as tests do).
    pub async fn build(listen: SocketAddr, state: AppState) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        Ok(Self { listener, state: Arc::new(state), limits: ServerLimits::default() })
    }

    /// Replaces the default connection limits.
    #[must_use]
    pub fn with_limits(self, limits: ServerLimits) -> Self {
        Self { limits, ..self }
    }

    /// The state its requests share (tests look at its caches).
    pub fn state(&self) -> Arc<AppState> {
        self.state.clone()
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish and
    /// writes the last batch of key last-used times.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let authenticator = self.state.authenticator.clone();
        // The replicas' fences first: a page read again after a cache is evicted must
        // already find its workspace fenced.
        let caches: Vec<Arc<dyn Invalidated>> = vec![
            self.state.reads.clone(),
            authenticator.clone(),
            self.state.first_pages.clone(),
            self.state.feed_heads.clone(),
            self.state.feed_bound.clone(),
        ];
        let bound_sampler = tokio::spawn(self.state.feed_bound.clone().keep(self.state.pool.clone()));
        let replica_monitor = tokio::spawn(self.state.reads.clone().watch());
        let listener =
            tokio::spawn(notifications::follow(self.state.pool.clone(), caches, self.state.change_listener.clone()));
        let flusher = tokio::spawn(authenticator.clone().flush_last_used_periodically());
        let state = self.state.clone();
        let forgetter = tokio::spawn(async move {
            let mut every_minute = tokio::time::interval(Duration::from_secs(60));
            loop {
                every_minute.tick().await;
                state.rate_limits.forget_idle();
            }
        });
        let stopping = self.state.shutdown.clone();
        let shutdown = async move {
            shutdown.await;
            // Answers the long polls, so the server's graceful wait is not theirs.
            stopping.cancel();
        };
        let result = server::serve(self.listener, app(self.state), self.limits, shutdown).await;
        listener.abort();
        bound_sampler.abort();
        replica_monitor.abort();
        flusher.abort();
        forgetter.abort();
        authenticator.flush_last_used().await;
        result
    }
}
