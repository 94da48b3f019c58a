//! Connections that hold a slot without completing requests: silent sockets, HTTP/2
//! prefaces and nothing after, idle HTTP/2 connections, and an HTTP/2 peer that
//! stopped answering. Each is closed within the header timeout (or a missed ping),
//! so that none of them can lock normal clients out.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Served, HEADER_TIMEOUT_MS, MAX_CONNECTIONS, WITHIN};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads until the server closes the connection; returns what it sent.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return received,
            Ok(read) => received.extend_from_slice(&buffer[..read]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_sending_nothing_an_h2c_preface_or_half_a_preface_are_closed_after_the_header_timeout() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;
    let header_timeout = Duration::from_millis(HEADER_TIMEOUT_MS);
    let openings: [&[u8]; 4] = [b"", PREFACE, b"PRI * HTTP", b"GET"];
    let mut held = Vec::new();
    // Every slot the server has.
    for index in 0..MAX_CONNECTIONS {
        let opening = openings[index % openings.len()];
        let mut stream = TcpStream::connect(served.address).await.expect("connect a silent client");
        stream.write_all(opening).await.expect("send the opening bytes");
        held.push((String::from_utf8_lossy(opening).into_owned(), stream));
    }
    let started = Instant::now();

    for (opening, mut stream) in held {
        tokio::time::timeout(WITHIN, read_until_closed(&mut stream)).await.unwrap_or_else(|_| {
            panic!("a connection that sent {opening:?} and then nothing still held its slot after {WITHIN:?}")
        });
    }

    let held_for = started.elapsed();
    assert!(
        held_for >= header_timeout.saturating_sub(Duration::from_millis(200)),
        "the silent connections were closed after {held_for:?}, before the header timeout of {header_timeout:?}"
    );
    served.assert_serves_a_normal_client("once the silent connections were closed").await;
    let expired = served.metrics().await.value("lectern_http_connections_expired_total", &[("reason", "no_request")]);
    assert!(
        expired.unwrap_or(0.0) >= 6.0,
        "the connections closed for sending no request head were not counted: {expired:?}"
    );
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_left_idle_after_its_response_is_closed_after_the_header_timeout() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;
    let stream = TcpStream::connect(served.address).await.expect("connect the HTTP/2 client");
    let (mut client, connection) = h2::client::handshake(stream).await.expect("HTTP/2 handshake (prior knowledge)");
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{}/v1/contacts", served.address))
        .header("x-api-key", &served.key)
        .body(())
        .expect("a request");
    let (response, _) = client.send_request(request, true).expect("send the request");
    let response = tokio::time::timeout(WITHIN, response).await.expect("answered in time").expect("a response");
    assert_eq!(response.status(), 200, "the HTTP/2 request was not served");
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the body");
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let idle_from = Instant::now();

    tokio::time::timeout(WITHIN, connection)
        .await
        .unwrap_or_else(|_| panic!("an idle HTTP/2 connection was still open after {WITHIN:?}"))
        .expect("the connection task")
        .ok();

    let idle_for = idle_from.elapsed();
    assert!(
        idle_for >= Duration::from_millis(HEADER_TIMEOUT_MS).saturating_sub(Duration::from_millis(200)),
        "the idle HTTP/2 connection was closed after {idle_for:?}, before the header timeout"
    );
    let expired = served.metrics().await.value("lectern_http_connections_expired_total", &[("reason", "idle")]);
    assert!(expired.unwrap_or(0.0) >= 1.0, "the idle connection's close was not counted: {expired:?}");
    served.assert_no_panic();
}

/// An HTTP/2 frame: its length, type, flags and stream, then the payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("a small frame").to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An HPACK literal (not indexed), its name given by static-table index or in full.
fn literal(name: Result<u8, &str>, value: &str) -> Vec<u8> {
    let mut field = Vec::new();
    match name {
        Ok(index) => field.push(index),
        Err(name) => {
            field.push(0);
            field.push(u8::try_from(name.len()).expect("a short name"));
            field.extend_from_slice(name.as_bytes());
        }
    }
    field.push(u8::try_from(value.len()).expect("a short value"));
    field.extend_from_slice(value.as_bytes());
    field
}

const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const END_STREAM_AND_HEADERS: u8 = 0x1 | 0x4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_peer_that_stops_answering_pings_is_closed_while_its_request_waits() {
    // Statements may wait far longer than the test: only a missed ping can end it.
    let served = Served::start_with(HEADER_TIMEOUT_MS, &[("LECTERN_DB_STATEMENT_TIMEOUT_MS", "120000")]).await;
    let mut lock = served.database.pool.begin().await.expect("begin the lock's transaction");
    sqlx::query("lock table contacts in access exclusive mode").execute(&mut *lock).await.expect("lock contacts");
    let mut stream = TcpStream::connect(served.address).await.expect("connect the raw HTTP/2 peer");
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    block.extend(literal(Ok(0x04), "/v1/contacts")); // :path
    block.extend(literal(Ok(0x01), "lectern.test")); // :authority
    block.extend(literal(Err("x-api-key"), &served.key));
    let opening =
        [PREFACE.to_vec(), frame(SETTINGS, 0, 0, &[]), frame(HEADERS, END_STREAM_AND_HEADERS, 1, &block)].concat();
    stream.write_all(&opening).await.expect("send the preface and a request");

    // The peer reads and never answers anything again, pings included.
    let received = tokio::time::timeout(WITHIN, read_until_closed(&mut stream))
        .await
        .unwrap_or_else(|_| panic!("a peer that answers no ping was still connected after {WITHIN:?}"));
    lock.rollback().await.expect("release the lock");

    let mut kinds = Vec::new();
    let mut rest = received.as_slice();
    while rest.len() >= 9 {
        let length = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        kinds.push((rest[3], u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]])));
        rest = rest.get(9 + length..).unwrap_or_default();
    }
    assert!(kinds.iter().any(|(kind, _)| *kind == PING), "the server never pinged: frames {kinds:?}");
    assert!(
        !kinds.iter().any(|(kind, stream)| *kind == HEADERS && *stream == 1),
        "the request was answered, so the connection was not closed for its missed ping: frames {kinds:?}"
    );
    served.assert_serves_a_normal_client("after the silent HTTP/2 peer was closed").await;
    served.assert_no_panic();
}
