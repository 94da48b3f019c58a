//! The HTTP shell: routes and operations, the envelope every response passes through,
//! the strict query gate, authentication, the server, and what operators read. The
//! operations hand each request to its feature ([`crate::listing`], [`crate::feed`],
//! [`crate::retrieve`]) with the feature's state and the request id.

mod auth;
mod caller;
mod compression;
pub mod contacts;
pub mod contracts;
pub mod envelope;
mod examples;
pub mod items;
mod long_poll;
pub mod openapi;
pub mod operations;
pub mod payload;
pub mod request_id;
pub mod server;
pub mod strict_query;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use lectern_runtime::server::{liveness_response, public_readiness_response};
use poem::endpoint::{make, make_sync};
use poem::web::Html;
use poem::{Endpoint, EndpointExt, Route};

pub use crate::app::{AppSettings, AppState};
pub use server::ServerLimits;

/// The whole HTTP surface, every response passing through the envelope layer, which
/// compresses it (br, gzip) for clients that accept it.
pub fn app(state: Arc<AppState>) -> impl Endpoint {
    let document = openapi::document();
    let reference = openapi::reference_page(&document);
    let readiness = operations::readiness_check(&state);
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
                async move { public_readiness_response(&readiness).await }
            }),
        )
        .data(state)
        .around(envelope::envelope)
}

/// Connections the kernel may hold completed for the server before it accepts them; it
/// caps this at `net.core.somaxconn` (4,096 by default since Linux 5.4). Tokio's default
/// (mio's and std's) of 128 overflowed when 10,000 clients connected within a quarter of
/// a second: the kernel then answered with SYN cookies, and about one connection in
/// 300,000 was reset before the server saw it.
const LISTEN_BACKLOG: u32 = 65_535;

/// A bound, not yet running server (zero2prod's shape: build, inspect the port, run).
pub struct Application {
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    limits: ServerLimits,
}

impl Application {
    /// Binds `listen` (port 0 picks a free port, as tests do).
    pub async fn build(listen: SocketAddr, state: AppState) -> std::io::Result<Self> {
        let socket = if listen.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // What tokio's own bind sets, so a restarted API takes its port back at once (not on
        // Windows, where it would let another process take the port).
        #[cfg(not(windows))]
        socket.set_reuseaddr(true)?;
        socket.bind(listen)?;
        let listener = socket.listen(LISTEN_BACKLOG)?;
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

    /// Serves until `shutdown` resolves; then reports itself not ready but keeps
    /// serving for the limits' shutdown grace, stops accepting, lets in-flight requests
    /// finish and writes the last batch of key last-used times and re-hashed keys.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let background = self.state.start_background_tasks();
        let authenticator = self.state.authenticator.clone();
        let stopping = self.state.shutdown.clone();
        let grace = self.limits.shutdown_grace;
        let shutdown = async move {
            shutdown.await;
            // Not ready from now on, and long polls answer at once (so the server's wait
            // for in-flight requests is not theirs); new requests are still served while
            // load balancers see the 503 and move traffic away.
            stopping.cancel();
            if !grace.is_zero() {
                tracing::info!(
                    grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                    "shutting down: /readyz answers 503; still serving until the grace period ends"
                );
                tokio::time::sleep(grace).await;
            }
        };
        let result = server::serve(self.listener, app(self.state), self.limits, shutdown).await;
        drop(background);
        authenticator.flush().await;
        result
    }
}
