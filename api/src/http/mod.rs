//! The HTTP application: routes, the envelope layer around them, and the server.

mod auth;
mod collection;
pub mod contacts;
pub mod envelope;
pub mod items;
pub mod openapi;
pub mod request_id;
pub mod strict_query;

use std::future::Future;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use poem::endpoint::make_sync;
use poem::listener::{Acceptor, TcpAcceptor};
use poem::{Endpoint, EndpointExt, Route, Server};
use poem_openapi::registry::MetaSchema;
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::keys::Authenticator;
use crate::listing::cursor::CursorSigner;
use crate::listing::params::query_param_type;

/// What every request needs, built once.
pub struct AppState {
    pub pool: PgPool,
    pub authenticator: Arc<Authenticator>,
    pub cursors: CursorSigner,
}

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

/// The whole HTTP surface, every response passing through the envelope layer.
pub fn app(state: Arc<AppState>) -> impl Endpoint {
    let document = openapi::document();
    Route::new()
        .at(
            "/v1/openapi.json",
            make_sync(move |_| {
                poem::Response::builder().content_type("application/json; charset=utf-8").body(document.clone())
            }),
        )
        .nest_no_strip("/v1", openapi::service())
        .data(state)
        .around(envelope::envelope)
}

/// A bound, not yet running server (zero2prod's shape: build, inspect the port, run).
pub struct Application {
    acceptor: TcpAcceptor,
    state: Arc<AppState>,
}

impl Application {
    /// Binds `listen` (port 0 picks a free port, as tests do).
    pub async fn build(listen: SocketAddr, state: AppState) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        Ok(Self { acceptor: TcpAcceptor::from_tokio(listener)?, state: Arc::new(state) })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.acceptor.local_addr().first().and_then(|addr| addr.as_socket_addr().copied())
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish and
    /// writes the last batch of key last-used times.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let authenticator = self.state.authenticator.clone();
        let listener = tokio::spawn(authenticator.clone().follow_key_changes());
        let flusher = tokio::spawn(authenticator.clone().flush_last_used_periodically());
        let result = Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(app(self.state), shutdown, Some(Duration::from_secs(10)))
            .await;
        listener.abort();
        flusher.abort();
        authenticator.flush_last_used().await;
        result
    }
}
