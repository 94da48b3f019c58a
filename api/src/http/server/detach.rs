//! A long poll that lets go of hyper's connection while it waits.
//!
//! Over HTTP/1.1, the envelope hands a waiting request (a [`LongPoll`]) to its
//! connection's task through the connection's `DetachSlot` instead of waiting itself.
//! The task drops hyper's connection (its read and write buffers, 8 KiB each, its
//! dispatcher, and the request's futures), takes the socket back, and waits on the long
//! poll alone. When the request is worth looking at again its feed looks, at most
//! [`RESUMING_AT_ONCE`] at a time, and the task writes the response itself and closes the
//! connection: nothing is left of the HTTP state that would keep it alive, and bytes the
//! client may have sent after its request (HTTP/1.1 pipelining) went with hyper's buffer.
//!
//! Hand code: hyper lends its connection a socket for good. It gives it back only once
//! the connection is done (`into_parts`), never while a request is in flight, so the
//! socket stays in a [`SharedIo`] slot that hyper reads and writes through and the task
//! can empty.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use poem::Response;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::http::long_poll::LongPoll;

/// Long polls looking at their feeds at once: each look holds a read's futures and
/// buffers (tens of KiB) while it runs, so 10,000 woken together would otherwise hold them
/// all at once; the rest wait as they are.
pub const RESUMING_AT_ONCE: usize = 64;

/// Waits until `handed` is worth looking at again, asks it for its response (at most
/// [`RESUMING_AT_ONCE`] at a time) and writes the response on `socket`; a look that lets
/// nothing through waits again.
pub async fn answer_when_worth_it<S>(mut handed: LongPoll, mut socket: S, resumes: Arc<tokio::sync::Semaphore>)
where
    S: AsyncWrite + Unpin,
{
    loop {
        handed.until_worth_looking().await;
        let Ok(_turn) = resumes.acquire().await else { return };
        let head_only = handed.head_only;
        match handed.answer().await {
            Ok(response) => {
                let _ = write_response(&mut socket, response, head_only).await;
                return;
            }
            Err(again) => handed = again,
        }
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
