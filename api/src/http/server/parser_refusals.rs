//! Responses hyper writes on its own, rewritten into the contract's error shape.
//!
//! When a request head cannot be parsed (a malformed request line or header, a head
//! past the buffer cap, a URI too long), hyper answers a bare 400, 431 or 414 itself,
//! without calling the application, and offers no hook to change that answer. Every
//! response of the application carries an `X-Request-Id` (the envelope adds it) and
//! hyper's own never do, so the connection's writer recognises them by that, and
//! sends the error shape instead, with a request id like every other response.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use poem::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::envelope::ErrorResponse;
use crate::http::request_id::RequestId;

/// A connection's socket, whose writes are checked for hyper's own error responses.
pub struct RefusalsInShape<S> {
    inner: S,
    /// The head cap, for the 431's message.
    max_head_bytes: usize,
    /// A rewritten response being written: its bytes, how many are out, and how many
    /// of hyper's bytes it stands for.
    replacing: Option<(Vec<u8>, usize, usize)>,
}

impl<S> RefusalsInShape<S> {
    pub fn new(inner: S, max_head_bytes: usize) -> Self {
        Self { inner, max_head_bytes, replacing: None }
    }

    /// Starts replacing `first` (the start of a write of `claimed` bytes) if it is one
    /// of hyper's own error responses.
    fn replace_if_refusal(&mut self, first: &[u8], claimed: usize) -> bool {
        if self.replacing.is_some() {
            return true;
        }
        let Some(status) = own_error_status(first) else { return false };
        self.replacing = Some((self.response(status), 0, claimed));
        true
    }

    fn response(&self, status: StatusCode) -> Vec<u8> {
        let message = match status {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
                format!("The request line and headers take more than {} bytes.", self.max_head_bytes)
            }
            StatusCode::URI_TOO_LONG => "The request target is too long.".to_owned(),
            _ => "The request is not well-formed HTTP: check its request line and headers.".to_owned(),
        };
        let request_id = RequestId::generate();
        let body = ErrorResponse::with_id(status, message, request_id.clone()).to_json();
        crate::http::operations::record_request("unmatched", "-", status.as_u16(), std::time::Duration::ZERO);
        tracing::info!(request_id = %request_id, status = status.as_u16(), "request refused by the HTTP parser");
        let reason = status.canonical_reason().unwrap_or("Error");
        let mut response = format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: {}\r\n\
             x-request-id: {request_id}\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n\
             connection: close\r\n\r\n",
            status.as_u16(),
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(body.as_bytes());
        response
    }
}

/// The status of a response hyper wrote by itself, if `bytes` starts one: an error
/// status whose head (written whole, before any body) has no request id.
fn own_error_status(bytes: &[u8]) -> Option<StatusCode> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 ").or_else(|| bytes.strip_prefix(b"HTTP/1.0 "))?;
    let status = StatusCode::from_bytes(rest.get(..3)?).ok()?;
    let head_end = bytes.windows(4).position(|window| window == b"\r\n\r\n")?;
    let has_request_id = bytes[..head_end]
        .split(|&byte| byte == b'\n')
        .any(|line| line.to_ascii_lowercase().starts_with(b"x-request-id:"));
    ((status.is_client_error() || status.is_server_error()) && !has_request_id).then_some(status)
}

impl<S: AsyncWrite + Unpin> RefusalsInShape<S> {
    /// Writes the rest of the replacement; ready with the bytes hyper asked to write.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Some((bytes, written, claimed)) = &mut self.replacing {
            if *written == bytes.len() {
                let claimed = *claimed;
                self.replacing = None;
                return Poll::Ready(Ok(claimed));
            }
            let sent = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if sent == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += sent;
        }
        Poll::Ready(Ok(0))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RefusalsInShape<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RefusalsInShape<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.replace_if_refusal(buf, buf.len()) {
            return self.poll_replacement(cx);
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().find(|buf| !buf.is_empty()).map_or(&[][..], |buf| &buf[..]);
        let claimed = bufs.iter().map(|buf| buf.len()).sum();
        if self.replace_if_refusal(first, claimed) {
            return self.poll_replacement(cx);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_own_error_responses_are_recognised_by_their_status_line() {
        assert_eq!(
            own_error_status(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n"),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        assert_eq!(own_error_status(b"HTTP/1.0 400 Bad Request\r\n\r\n"), Some(StatusCode::BAD_REQUEST));
        assert_eq!(own_error_status(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(own_error_status(b"HTTP/1.1 400 Bad Request\r\nx-request-id: abc\r\n\r\n{}"), None, "ours");
        assert_eq!(own_error_status(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00"), None, "an HTTP/2 frame");
        assert_eq!(own_error_status(b"HTTP/1.1 4"), None);
    }

    #[tokio::test]
    async fn a_bare_431_written_while_no_request_is_in_flight_leaves_in_the_error_shape() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (client, server) = tokio::io::duplex(64 * 1024);
        let mut connection = RefusalsInShape::new(server, 65_536);
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        connection.write_all(bare).await.unwrap();
        connection.shutdown().await.unwrap();
        drop(connection);

        let mut received = String::new();
        let mut client = client;
        client.read_to_string(&mut received).await.unwrap();
        let (head, body) = received.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
        assert!(head.contains("x-request-id: "), "{head}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "REQUEST_FAILED");
        assert!(body["error"]["message"].as_str().unwrap().contains("65536 bytes"), "{body}");
        assert!(body["requestId"].is_string());
    }

    #[tokio::test]
    async fn the_applications_own_responses_pass_unchanged() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let mut connection = RefusalsInShape::new(server, 65_536);
        let ours = b"HTTP/1.1 404 Not Found\r\nx-request-id: abc\r\ncontent-length: 2\r\n\r\n{}";
        connection.write_all(ours).await.unwrap();
        drop(connection);

        let mut received = Vec::new();
        client.read_to_end(&mut received).await.unwrap();
        assert_eq!(received, ours);
    }
}
