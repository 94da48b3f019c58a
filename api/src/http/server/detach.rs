//! A parked long poll that lets go of hyper's connection while it waits.
//!
//! Over HTTP/1.1, the envelope hands a parked request (see `feed::parking`) to its
//! connection's task through the connection's [`DetachSlot`] instead of waiting itself.
//! The task drops hyper's connection (its read and write buffers, 8 KiB each, its
//! dispatcher, and the request's futures), takes the socket back, and waits on the parked
//! record alone. When the request is worth looking at again it goes through the
//! application once more, at most [`RESUMING_AT_ONCE`] at a time, and the task writes
//! the response itself and closes the connection: nothing is left of the HTTP state that
//! would keep it alive, and bytes the client may have sent after its request (HTTP/1.1
//! pipelining) went with hyper's buffer.
//!
//! Hand code: hyper lends its connection a socket for good. It gives it back only once
//! the connection is done (`into_parts`), never while a request is in flight, so the
//! socket stays in a [`SharedIo`] slot that hyper reads and writes through and the task
//! can empty.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use poem::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;

use crate::feed::parking::{Parked, Parking};

/// Parked requests sent through the application at once: each holds a request's whole
/// way through it (tens of KiB) while it runs, so 10,000 woken together would otherwise
/// hold them all at once; the rest wait as parked records.
pub const RESUMING_AT_ONCE: usize = 64;

/// Waits until `handed` is worth looking at again, sends it through `endpoint` (at most
/// [`RESUMING_AT_ONCE`] at a time) and writes its response on `socket`; parked again
/// meanwhile (it arrives in `slot` once more), it waits again.
pub async fn answer_when_worth_it<E, S>(
    mut handed: Box<Detached>,
    mut socket: S,
    endpoint: Arc<E>,
    slot: Arc<DetachSlot>,
    resumes: Arc<tokio::sync::Semaphore>,
) where
    E: poem::Endpoint,
    S: AsyncWrite + Unpin,
{
    loop {
        let resume = handed.parked.until_worth_looking().await;
        let Ok(_turn) = resumes.acquire().await else { return };
        let mut request = handed.request;
        let head_only = request.method() == poem::http::Method::HEAD;
        request.set_data(Parking::resuming(resume));
        let answered = {
            let answering = Box::pin(endpoint.get_response(request));
            tokio::select! {
                response = answering => Ok(response),
                again = slot.arrived() => Err(again),
            }
        };
        match answered {
            Ok(response) => {
                let _ = write_response(&mut socket, response, head_only).await;
                return;
            }
            Err(again) => handed = again,
        }
    }
}

/// A parked request taken from hyper: what it waits on, and its head to send again.
pub struct Detached {
    pub parked: Parked,
    pub request: Request,
}

/// Where the envelope leaves a parked request for its connection's task (one per
/// HTTP/1.x connection, in the data of its requests that may wait).
#[derive(Default)]
pub struct DetachSlot {
    detached: Mutex<Option<Box<Detached>>>,
    arrived: Notify,
}

impl DetachSlot {
    /// Leaves `detached` for the connection's task and wakes it.
    pub fn hand_over(&self, detached: Box<Detached>) {
        *self.lock() = Some(detached);
        self.arrived.notify_one();
    }

    /// The next request handed over.
    pub async fn arrived(&self) -> Box<Detached> {
        loop {
            if let Some(detached) = self.lock().take() {
                return detached;
            }
            self.arrived.notified().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Box<Detached>>> {
        self.detached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The socket, lent to hyper through a slot its connection's task can take it back from
/// (reads and writes on an emptied slot fail as `NotConnected`).
pub struct SharedIo<T>(pub Arc<Mutex<Option<T>>>);

impl<T> SharedIo<T> {
    fn with<R>(&self, f: impl FnOnce(Pin<&mut T>) -> Poll<io::Result<R>>) -> Poll<io::Result<R>>
    where
        T: Unpin,
    {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(io) => f(Pin::new(io)),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SharedIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.with(|io| io.poll_read(cx, buf))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SharedIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.with(|io| io.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|io| io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|io| io.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.with(|io| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }
}

/// Writes `response` as HTTP/1.1 (its body whole, with `content-length` and `date` as
/// hyper would add them; the head alone for a `HEAD`), and closes the connection.
pub async fn write_response<W: AsyncWrite + Unpin>(io: &mut W, response: Response, head_only: bool) -> io::Result<()> {
    let (parts, body) = response.into_parts();
    let body = body.into_bytes().await.map_err(|error| io::Error::other(error.to_string()))?;
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == poem::http::header::CONTENT_LENGTH || name == poem::http::header::CONNECTION {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    head.extend_from_slice(format!("date: {}\r\n", httpdate::fmt_http_date(std::time::SystemTime::now())).as_bytes());
    head.extend_from_slice(b"connection: close\r\n\r\n");
    io.write_all(&head).await?;
    if !head_only {
        io.write_all(&body).await?;
    }
    io.shutdown().await
}
