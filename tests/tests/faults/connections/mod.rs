//! Hostile connections against the real `lectern-api serve`: a slowloris client, heads
//! over the size cap, too many headers, more connections than allowed, a GET with a
//! body and an absurd URI. Each is refused cleanly (a 4xx, or the connection closed),
//! never a 5xx and never a hang, and a normal client is served throughout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_tests::process::Metrics;
use lectern_tests::seed::create_key;
use lectern_tests::serve::Serve;
use lectern_tests::{ContactSeed, Reply, TestDatabase};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;

mod bursts;
mod deadlines;
mod refusals;

/// Within this any exchange ends, or the server hangs (generous: small shared machine).
const WITHIN: Duration = Duration::from_secs(20);
/// The header read timeout of the servers in these tests, unless a test needs idle
/// connections to stay.
const HEADER_TIMEOUT_MS: u64 = 1_000;
/// Connections a server here accepts at once.
const MAX_CONNECTIONS: usize = 8;

/// `lectern-api serve` on free ports against a database of its own with one contact.
struct Served {
    serve: Serve,
    address: SocketAddr,
    key: String,
    database: TestDatabase,
}

impl Served {
    async fn start(header_timeout_ms: u64) -> Self {
        Self::start_with(header_timeout_ms, &[]).await
    }

    /// As [`Served::start`], with more settings in the environment.
    async fn start_with(header_timeout_ms: u64, settings: &[(&str, &str)]) -> Self {
        let database = TestDatabase::create().await;
        let workspace = Uuid::new_v4();
        let (_, key) = create_key(&database.pool, workspace, &[Scope::ContactsRead]).await;
        ContactSeed::named("Acme").insert(&database.pool, workspace).await;
        let serve = Serve::on(&database.url)
            .env("LECTERN_HEADER_READ_TIMEOUT_MS", &header_timeout_ms.to_string())
            .env("LECTERN_MAX_CONNECTIONS", &MAX_CONNECTIONS.to_string())
            .envs(settings)
            .start()
            .await;
        let address = serve.api.parse().unwrap_or_else(|error| panic!("serve's address {}: {error}", serve.api));
        Self { serve, address, key, database }
    }

    /// A normal client on a connection of its own (none kept alive) gets a 200.
    async fn assert_serves_a_normal_client(&self, when: &str) {
        let reply = tokio::time::timeout(WITHIN, self.normal_get("/v1/contacts"))
            .await
            .unwrap_or_else(|_| panic!("a normal client was not answered {when}"));
        assert_eq!(reply.status, 200, "a normal client was not served {when}: {}", reply.text);
    }

    async fn normal_get(&self, path: &str) -> Reply {
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("HTTP client");
        let response = http
            .get(format!("http://{}{path}", self.address))
            .header("X-API-Key", &self.key)
            .send()
            .await
            .expect("a normal request reaches serve");
        Reply::read(response).await
    }

    /// Sends `request` on a fresh connection and reads what comes back.
    async fn exchange(&self, request: &[u8]) -> Outcome {
        tokio::time::timeout(WITHIN, exchange(self.address, request))
            .await
            .unwrap_or_else(|_| panic!("no answer and no close within {WITHIN:?}: the server hangs"))
    }

    /// The server's log shows no panic.
    fn assert_no_panic(&self) {
        self.serve.service.assert_no_panic();
    }

    async fn metrics(&self) -> Metrics {
        self.serve.metrics().await
    }
}

/// What a raw exchange ended with.
#[derive(Debug)]
enum Outcome {
    /// An HTTP response: its status, and the whole text (head and body).
    Answered { status: u16, text: String },
    /// The server closed (or reset) the connection without a response.
    Closed,
}

impl Outcome {
    /// Refused cleanly: one of `statuses`, or the connection closed. Never a 5xx.
    fn assert_refused(&self, statuses: &[u16], what: &str) {
        match self {
            Self::Closed => {}
            Self::Answered { status, text } => {
                assert!(*status < 500, "{what} was answered with a server error: {text}");
                assert!(statuses.contains(status), "{what} was answered {status}, not one of {statuses:?}: {text}");
            }
        }
    }

    /// The response's JSON body.
    fn body(&self) -> Value {
        match self {
            Self::Answered { text, .. } => {
                let body = text.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
                serde_json::from_str(body).unwrap_or_else(|error| panic!("the body is not JSON ({error}): {text}"))
            }
            Self::Closed => panic!("the connection was closed without a response"),
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            Self::Answered { status, .. } => Some(*status),
            Self::Closed => None,
        }
    }
}

/// Writes `request` (a write cut short by the server is fine) and reads until the
/// server closes the connection.
async fn exchange(address: SocketAddr, request: &[u8]) -> Outcome {
    let mut stream = TcpStream::connect(address).await.expect("connect to serve");
    let _ = stream.write_all(request).await;
    let mut received = Vec::new();
    let mut buffer = [0_u8; 8 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => received.extend_from_slice(&buffer[..read]),
        }
    }
    let text = String::from_utf8_lossy(&received).into_owned();
    let status = text.strip_prefix("HTTP/1.1 ").and_then(|rest| rest.get(..3)).and_then(|code| code.parse().ok());
    match status {
        Some(status) => Outcome::Answered { status, text },
        None if received.is_empty() => Outcome::Closed,
        None => panic!("the server answered something that is not HTTP/1.1: {text:?}"),
    }
}

/// A GET with `extra` header lines (each without its CRLF), asking for the close.
fn request(path: &str, key: &str, extra: &[String]) -> Vec<u8> {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: lectern.test\r\nX-API-Key: {key}\r\nConnection: close\r\n");
    for line in extra {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_client_is_cut_off_after_the_header_timeout_while_a_normal_client_is_served() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;
    let header_timeout = Duration::from_millis(HEADER_TIMEOUT_MS);
    let stream = TcpStream::connect(served.address).await.expect("connect the slow client");
    let (mut reading, mut writing) = stream.into_split();
    writing.write_all(b"GET /v1/contacts HTTP/1.1\r\nHost: lectern.test\r\nX-Slow").await.expect("first bytes");
    let started = Instant::now();
    let closed = tokio::spawn(async move {
        let mut buffer = [0_u8; 1024];
        let mut received = Vec::new();
        loop {
            match reading.read(&mut buffer).await {
                Ok(0) | Err(_) => return (Instant::now(), String::from_utf8_lossy(&received).into_owned()),
                Ok(read) => received.extend_from_slice(&buffer[..read]),
            }
        }
    });

    let mut normal_served = false;
    while !closed.is_finished() {
        assert!(
            started.elapsed() < header_timeout + WITHIN,
            "a client sending a header byte every 200 ms kept its connection"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        if writing.write_all(b"x").await.is_err() {
            break;
        }
        if !normal_served {
            served.assert_serves_a_normal_client("while a slowloris client drips its head").await;
            normal_served = true;
        }
    }
    let (closed_at, answer) = tokio::time::timeout(WITHIN, closed).await.expect("the close is seen").expect("reader");

    let held = closed_at - started;
    assert!(normal_served, "the slow client was cut off before a normal client could be tried ({held:?})");
    assert!(
        held >= header_timeout.saturating_sub(Duration::from_millis(100)),
        "the slow client was cut off after {held:?}, before the header timeout of {header_timeout:?}"
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "the slow client should get nothing or a 408: {answer:?}"
    );
    served.assert_serves_a_normal_client("after the slowloris client was cut off").await;
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_16_kib_is_refused_with_431_never_a_5xx_or_a_hang() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;

    let one_huge_header = request("/v1/contacts", &served.key, &[format!("X-Padding: {}", "a".repeat(20 * 1024))]);
    let many_headers_over_the_cap: Vec<String> =
        (0..40).map(|index| format!("X-Padding-{index}: {}", "b".repeat(512))).collect();
    let many_medium_headers = request("/v1/contacts", &served.key, &many_headers_over_the_cap);
    let just_under = request("/v1/contacts", &served.key, &[format!("X-Padding: {}", "c".repeat(12 * 1024))]);

    served.exchange(&one_huge_header).await.assert_refused(&[431], "a 20 KiB header");
    served.exchange(&many_medium_headers).await.assert_refused(&[431], "40 headers of 512 bytes");
    let under = served.exchange(&just_under).await;
    assert_eq!(under.status(), Some(200), "a 12 KiB head is under the cap and must be served: {under:?}");
    served.assert_serves_a_normal_client("after heads over the cap").await;
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_more_than_64_headers_is_refused_and_one_with_fewer_is_served() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;
    // `request` adds three headers of its own (Host, X-API-Key, Connection).
    let fillers =
        |count: usize| -> Vec<String> { (0..count).map(|index| format!("X-Filler-{index}: {index}")).collect() };

    let too_many = served.exchange(&request("/v1/contacts", &served.key, &fillers(70))).await;
    let allowed = served.exchange(&request("/v1/contacts", &served.key, &fillers(60))).await;

    too_many.assert_refused(&[431], "73 headers");
    assert_eq!(allowed.status(), Some(200), "63 headers are within the limit and must be served: {allowed:?}");
    served.assert_serves_a_normal_client("after too many headers").await;
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_new_connection_is_closed_at_once_and_new_clients_are_served_once_the_idle_ones_go() {
    // A long header timeout, so the idle clients are not cut off by it meanwhile.
    let served = Served::start(60_000).await;
    let refused_before = served.metrics().await.value("lectern_http_connections_refused_total", &[]).unwrap_or(0.0);

    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(TcpStream::connect(served.address).await.expect("connect an idle client"));
    }
    let mut further = TcpStream::connect(served.address).await.expect("the kernel still completes the handshake");
    let mut buffer = [0_u8; 64];
    let read = tokio::time::timeout(WITHIN, further.read(&mut buffer))
        .await
        .expect("a connection past the limit must be closed at once, not left waiting");
    assert!(matches!(read, Ok(0) | Err(_)), "a connection past the limit got data: {read:?}");

    // The held connections are still open and served.
    let mut held = idle.pop().expect("an idle client");
    held.write_all(&request("/v1/contacts", &served.key, &[])).await.expect("write on a held connection");
    let mut answer = Vec::new();
    tokio::time::timeout(WITHIN, held.read_to_end(&mut answer)).await.expect("answer on a held connection").ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "a held connection was not served: {answer}");
    let refused = served.metrics().await.value("lectern_http_connections_refused_total", &[]).unwrap_or(0.0);
    assert!(refused > refused_before, "the refused connection was not counted ({refused_before} → {refused})");

    drop(held);
    drop(idle);
    let deadline = Instant::now() + WITHIN;
    loop {
        let served_now = tokio::time::timeout(WITHIN, served.normal_get("/v1/contacts")).await;
        if let Ok(reply) = served_now {
            if reply.status == 200 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "once the idle clients left, new clients were still not served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_body_is_a_400_validation_error_naming_the_body_whether_sized_or_chunked() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;
    let body = r#"{"workspaceId":"6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11"}"#;
    let sized = request(
        "/v1/contacts",
        &served.key,
        &["Content-Type: application/json".to_owned(), format!("Content-Length: {}", body.len())],
    );
    let sized = [sized, body.as_bytes().to_vec()].concat();
    let chunked = request("/v1/contacts", &served.key, &["Transfer-Encoding: chunked".to_owned()]);
    let chunked = [chunked, format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).into_bytes()].concat();

    for (what, raw) in [("a sized body", sized), ("a chunked body", chunked)] {
        let outcome = served.exchange(&raw).await;
        assert_eq!(outcome.status(), Some(400), "a GET with {what}: {outcome:?}");
        let body = outcome.body();
        assert_eq!(body["error"]["code"], "VALIDATION_ERROR", "a GET with {what}: {body}");
        let details = body["error"]["details"].as_array().cloned().unwrap_or_default();
        assert!(
            details.iter().any(|detail| detail.as_str().is_some_and(|text| text.starts_with("body"))),
            "the details of a GET with {what} must name the body: {body}"
        );
        assert!(body["requestId"].is_string(), "no requestId: {body}");
    }
    served.assert_serves_a_normal_client("after GETs with bodies").await;
    served.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurdly_long_uri_is_refused_cleanly_and_a_long_one_under_the_cap_is_a_contract_400() {
    let served = Served::start(HEADER_TIMEOUT_MS).await;

    let absurd =
        served.exchange(&request(&format!("/v1/contacts?search={}", "a".repeat(20 * 1024)), &served.key, &[])).await;
    let long =
        served.exchange(&request(&format!("/v1/contacts?search={}", "a".repeat(10 * 1024)), &served.key, &[])).await;
    let long_path =
        served.exchange(&request(&format!("/v1/contacts/{}", "a".repeat(10 * 1024)), &served.key, &[])).await;

    absurd.assert_refused(&[400, 414, 431], "a 20 KiB URI");
    assert_eq!(long.status(), Some(400), "a 10 KiB search is over 120 characters: {long:?}");
    let body = long.body();
    assert_eq!(body["error"]["code"], "VALIDATION_ERROR", "{body}");
    assert!(
        body["error"]["details"].as_array().is_some_and(|details| details
            .iter()
            .any(|detail| detail.as_str().is_some_and(|text| text.starts_with("search")))),
        "the details must name search: {body}"
    );
    assert_eq!(long_path.status(), Some(400), "a 10 KiB id is malformed, a 400: {long_path:?}");
    assert_eq!(long_path.body()["error"]["code"], "VALIDATION_ERROR");
    served.assert_serves_a_normal_client("after absurd URIs").await;
    served.assert_no_panic();
}
