//! The connection loop: ours rather than poem's `Server`, so that the limits a
//! hostile client probes are ours to set. Every connection must complete a request
//! head within a deadline, whatever protocol it speaks, and one with no request in
//! flight for that long is closed ([`activity`]); heads have a size cap, and what
//! hyper refuses on its own still leaves in the error shape ([`parser_refusals`]);
//! HTTP/2 connections are pinged; connections are capped; and shutdown lets in-flight
//! requests finish within a grace period.

mod activity;
pub mod detach;
mod parser_refusals;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use poem::web::{LocalAddr, RemoteAddr};
use poem::{Addr, Endpoint};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::activity::{Activity, Expired, Tracked};
use self::detach::SharedIo;
use self::parser_refusals::RefusalsInShape;
use super::envelope::MAX_HEAD_BYTES;
use super::long_poll::{DetachSlot, LongPoll};

/// What one server will put up with.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Open connections at most; past it new ones are closed at once.
    pub max_connections: usize,
    /// Time a connection has to complete a request head: from its accept, and from the
    /// end of its previous response (so idle keep-alive connections close after it).
    /// HTTP/2 connections are also pinged this often, and closed when a ping goes
    /// unanswered for as long.
    pub header_read_timeout: Duration,
    /// Bytes of request head the connection layer buffers (HTTP/1.1: a 431 past it).
    pub max_header_bytes: usize,
    /// Headers a request may carry (HTTP/1.1).
    pub max_headers: usize,
    /// How long, once shutdown is asked for, the server keeps accepting and serving while
    /// it reports itself not ready, before it stops accepting.
    pub shutdown_grace: Duration,
    /// How long shutdown then waits for in-flight requests.
    pub grace_period: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 4 * MAX_HEAD_BYTES,
            max_headers: 64,
            shutdown_grace: Duration::ZERO,
            grace_period: Duration::from_secs(10),
        }
    }
}

/// hyper refuses buffers smaller than this.
const MIN_HEADER_BUFFER: usize = 8 * 1024;

/// How long an expired connection with requests still open (an HTTP/2 stream that
/// raced with the deadline) gets to finish them after its `GOAWAY`.
const CLOSING_GRACE: Duration = Duration::from_secs(1);

/// Serves `endpoint` on `listener` until `shutdown` resolves, then stops accepting,
/// lets open requests finish (up to the grace period) and returns.
pub async fn serve<E>(
    listener: TcpListener,
    endpoint: E,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    E: Endpoint + 'static,
{
    let shared = Arc::new(Shared {
        endpoint: Arc::new(endpoint),
        protocols: protocols(&limits),
        head_cap: builder_head_cap(&limits),
        header_read_timeout: limits.header_read_timeout,
        local: listener.local_addr()?,
        resumes: Arc::new(Semaphore::new(detach::RESUMING_AT_ONCE)),
    });
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let stopping = CancellationToken::new();
    let tracker = TaskTracker::new();
    tokio::pin!(shutdown);

    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            metrics::counter!(crate::metric_names::CONNECTIONS_REFUSED).increment(1);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tracker.spawn(connection(stream, peer, shared.clone(), stopping.clone(), permit));
    }

    drop(listener);
    stopping.cancel();
    tracker.close();
    if tokio::time::timeout(limits.grace_period, tracker.wait()).await.is_err() {
        tracing::warn!(grace_period = ?limits.grace_period, "requests still running at the end of the grace period were cut off");
    }
    Ok(())
}

/// What every connection of one server uses.
struct Shared<E> {
    endpoint: Arc<E>,
    protocols: auto::Builder<TokioExecutor>,
    head_cap: usize,
    header_read_timeout: Duration,
    local: SocketAddr,
    resumes: Arc<Semaphore>,
}

/// One connection, holding its place under the cap (`permit`) until it closes: served by
/// hyper, then, if a long poll it carried was handed over to wait, by that request alone.
async fn connection<E: Endpoint + 'static>(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared<E>>,
    stopping: CancellationToken,
    permit: OwnedSemaphorePermit,
) {
    let slot = Arc::new(DetachSlot::default());
    let socket = Arc::new(std::sync::Mutex::new(Some(RefusalsInShape::new(stream, shared.head_cap))));
    // Boxed, so that hyper's connection (and this future's room for it) is freed before
    // a handed-over request waits (2 KiB a waiting long poll; bench/history.md).
    let handed = Box::pin(through_hyper(SharedIo(socket.clone()), peer, &shared, &slot, &stopping)).await;
    let taken = socket.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let (Some(handed), Some(socket)) = (handed, taken) {
        Box::pin(detach::answer_when_worth_it(handed, socket, shared.resumes.clone())).await;
    }
    drop(permit);
}

/// Serves the connection with hyper until it ends, expires, the server stops, or a long
/// poll is handed over through `slot` (returned).
async fn through_hyper<E: Endpoint + 'static>(
    io: SharedIo<RefusalsInShape<TcpStream>>,
    peer: SocketAddr,
    shared: &Shared<E>,
    slot: &Arc<DetachSlot>,
    stopping: &CancellationToken,
) -> Option<LongPoll> {
    let activity = Activity::new();
    let answering = activity.clone();
    let (endpoint, local, offered) = (shared.endpoint.clone(), shared.local, slot.clone());
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let endpoint = endpoint.clone();
        let in_flight = answering.begin();
        // Only a long poll over HTTP/1.x can let go of its connection (HTTP/2 multiplexes).
        let slot = (request.version() < hyper::Version::HTTP_2).then(|| offered.clone());
        async move {
            let mut request = poem::Request::from((
                request,
                LocalAddr(Addr::SocketAddr(local)),
                RemoteAddr(Addr::SocketAddr(peer)),
                poem::http::uri::Scheme::HTTP,
            ));
            if let Some(slot) = slot {
                request.set_data(slot);
            }
            // Boxed: hyper allocates room for this future with each connection, idle ones
            // included, and holds it for as long as a long poll waits.
            let response: hyper::Response<BoxBody<Bytes, std::io::Error>> =
                Box::pin(endpoint.get_response(request)).await.into();
            // The request stays in flight until its body has been handed over.
            Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
        }
    });
    let connection = shared.protocols.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    loop {
        let deadline = activity.deadline(shared.header_read_timeout);
        let expired = async {
            match deadline {
                Some((at, why)) => {
                    tokio::time::sleep_until(at).await;
                    why
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = connection.as_mut() => return None,
            handed = slot.arrived() => return Some(handed),
            () = activity.changed() => {}
            why = expired => {
                metrics::counter!(crate::metric_names::CONNECTIONS_EXPIRED, "reason" => why.label()).increment(1);
                if why == Expired::Idle {
                    // A GOAWAY for HTTP/2; HTTP/1 closes at once.
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSING_GRACE, connection.as_mut()).await;
                }
                return None;
            }
            () = stopping.cancelled() => {
                connection.as_mut().graceful_shutdown();
                let _ = connection.as_mut().await;
                return None;
            }
        }
    }
}

/// Bytes of head hyper buffers before it refuses a request.
fn builder_head_cap(limits: &ServerLimits) -> usize {
    limits.max_header_bytes.max(MIN_HEADER_BUFFER)
}

/// HTTP/1.1 and HTTP/2, told apart by what the client sends first.
fn protocols(limits: &ServerLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(builder_head_cap(limits))
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        // A peer that vanished mid-request (no FIN, no RST) is found by its missing pong.
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout);
    builder
}
