//! What one connection is doing, and when it must be closed for doing nothing.
//!
//! hyper's own header timeout starts only once its HTTP/1 parser runs: the `auto`
//! builder first waits for enough bytes to tell HTTP/1 from HTTP/2, with no deadline,
//! and HTTP/2 has no header timeout at all. A socket that sends nothing, or an h2c
//! preface and then nothing, would hold a connection slot for ever. So each connection
//! counts its requests in flight here, and its task closes it once it has had none for
//! the header timeout: from the accept to the first complete request head, and from
//! the end of each response to the next head, whatever protocol it speaks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// Why a connection's task closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// No request head arrived within the timeout of the accept.
    NoRequest,
    /// Its previous response ended more than the timeout ago and no request followed.
    Idle,
}

impl Expired {
    /// The `reason` label of the metric that counts these.
    pub fn label(self) -> &'static str {
        match self {
            Self::NoRequest => "no_request",
            Self::Idle => "idle",
        }
    }
}

/// Shared by a connection's task (which waits on it) and its requests (which report).
#[derive(Debug)]
pub struct Activity {
    accepted: Instant,
    in_flight: AtomicUsize,
    /// Whether any request head has arrived.
    served: AtomicBool,
    /// When the last request in flight ended.
    idle_since: Mutex<Instant>,
    /// Wakes the connection's task when a request starts or ends.
    changed: Notify,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Self {
            accepted: now,
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(now),
            changed: Notify::new(),
        })
    }

    /// A request head has arrived; the returned guard ends the request when dropped
    /// (keep it until the response body has been sent).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.served.store(true, Ordering::Release);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the connection expires if nothing happens, and why; `None` while a
    /// request is in flight.
    pub fn deadline(&self, timeout: Duration) -> Option<(Instant, Expired)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.served.load(Ordering::Acquire) {
            Some((*self.lock_idle_since() + timeout, Expired::Idle))
        } else {
            Some((self.accepted + timeout, Expired::NoRequest))
        }
    }

    /// Resolves when a request starts or ends (or has since the last call).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    fn lock_idle_since(&self) -> std::sync::MutexGuard<'_, Instant> {
        // A plain store of an instant: a poisoned lock still holds a valid one.
        self.idle_since.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One request in flight on its connection.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

/// A response body that keeps its request in flight until hyper has taken all of it
/// (and dropped it). Everything else is the inner body's, its size hint included, so
/// a sized response keeps its `content-length`.
pub struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    pub fn new(body: B, in_flight: InFlight) -> Self {
        Self { body, _in_flight: in_flight }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        *activity.lock_idle_since() = Instant::now();
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
        activity.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_a_request_expires_one_timeout_after_its_accept() {
        let activity = Activity::new();
        let (deadline, why) = activity.deadline(TIMEOUT).unwrap();
        assert_eq!(why, Expired::NoRequest);
        assert_eq!(deadline, activity.accepted + TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_never_expires_and_its_end_starts_the_idle_clock() {
        let activity = Activity::new();
        let request = activity.begin();
        assert!(activity.deadline(TIMEOUT).is_none());
        tokio::time::advance(Duration::from_secs(60)).await;
        drop(request);
        let (deadline, why) = activity.deadline(TIMEOUT).unwrap();
        assert_eq!(why, Expired::Idle);
        assert_eq!(deadline, Instant::now() + TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_starting_wakes_the_connections_task() {
        let activity = Activity::new();
        let _request = activity.begin();
        tokio::time::timeout(Duration::from_millis(1), activity.changed()).await.unwrap();
    }
}
