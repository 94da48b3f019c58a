//! How the envelope sends a request that may wait through the application: a long poll
//! that finds nothing leaves a parked record (see `feed::parking`) and its stack unwinds;
//! the request then waits as that record and a copy of its head, here over HTTP/2, or in
//! its connection's task over HTTP/1.1 (see `server::detach`), and is sent through again
//! when its feed moves.

use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderValue, Uri};
use poem::{Body, Endpoint, IntoResponse, Request, RequestParts, Response};

use super::caller;
use super::server::detach::{DetachSlot, Detached};
use crate::feed::parking::Parking;
use crate::rate_limit::Standing;

/// What a parked long poll sent through again by its connection keeps of its first pass:
/// when it began, and where its key stood when it was counted.
#[derive(Clone, Copy, Debug)]
pub struct Resumed {
    pub started: Instant,
    pub standing: Option<Standing>,
}

impl Resumed {
    /// Set when `request` is a long poll its connection sends through again.
    pub fn of(request: &Request) -> Option<Self> {
        request.data::<Self>().copied()
    }
}

/// Whether a request for `uri` may be a long poll: a feed request that asks to `wait`.
/// Only these are offered a parking place, and over HTTP/1.1 their connection's slot.
pub fn may_wait(uri: &Uri) -> bool {
    uri.path().ends_with("/changes") && uri.query().is_some_and(|query| query.contains("wait"))
}

/// Sends `request` through `inner`. A long poll that parks is sent through again once its
/// feed moves, or handed to its connection when the connection offered a [`DetachSlot`]
/// (this future then never ends: the connection drops it).
pub async fn answer<E: Endpoint>(inner: &E, mut request: Request, started: Instant) -> poem::Result<Response> {
    if !may_wait(request.uri()) {
        // Boxed: inline, the whole application's future would be carried (and copied)
        // by every layer outside it.
        return Box::pin(inner.call(request)).await.map(IntoResponse::into_response);
    }
    let mut parking = request.data::<Parking>().cloned().unwrap_or_default();
    let detach = request.data::<Arc<DetachSlot>>().cloned();
    loop {
        // Taken before the pass, which consumes the request, even when the pass answers at
        // once: a few hundred bytes, against keeping hyper's read buffer for the wait.
        let again = head_copy(&request);
        request.set_data(parking.clone());
        let outcome = Box::pin(inner.call(request)).await.map(IntoResponse::into_response);
        let Some(parked) = parking.take_parked() else {
            return outcome;
        };
        drop(outcome);
        if let Some(slot) = &detach {
            let mut again = again;
            // Counted on its first pass only; a later pass finds the standing carried.
            let standing = caller::standing().or_else(|| Resumed::of(&again).and_then(|resumed| resumed.standing));
            again.set_data(Resumed { started, standing });
            slot.hand_over(Box::new(Detached { parked, request: again }));
            return std::future::pending().await;
        }
        parking = Parking::resuming(Box::pin(parked.until_worth_looking()).await);
        request = again;
    }
}

/// `request` again, without its body (a feed request has none). Its target and header
/// values are copied, not shared: hyper parses them as slices of the connection's read
/// buffer, and a shared copy would keep that buffer's whole allocation alive while the
/// request waits, beside the one hyper reads into meanwhile.
fn head_copy(request: &Request) -> Request {
    let mut head = poem::http::Request::new(());
    *head.method_mut() = request.method().clone();
    *head.uri_mut() = Uri::from_maybe_shared(bytes::Bytes::copy_from_slice(request.uri().to_string().as_bytes()))
        .unwrap_or_else(|_| request.uri().clone());
    *head.version_mut() = request.version();
    let headers = head.headers_mut();
    headers.reserve(request.headers().len());
    for (name, value) in request.headers() {
        let mut copied = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        copied.set_sensitive(value.is_sensitive());
        headers.append(name.clone(), copied);
    }
    *head.extensions_mut() = request.extensions().clone();
    let (parts, ()) = head.into_parts();
    let parts = RequestParts::from((
        parts,
        request.local_addr().clone(),
        request.remote_addr().clone(),
        request.scheme().clone(),
    ));
    Request::from_parts(parts, Body::empty())
}
