//! Restarts without refusals: on SIGTERM `serve` answers 503 on `/readyz` at once and keeps
//! accepting and serving for its shutdown grace, then stops accepting and finishes what is
//! in flight. A load balancer that routes by readiness therefore moves traffic away before
//! any connection is refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lectern_api::keys::Scope;
use lectern_tests::seed::create_key;
use lectern_tests::serve::Serve;
use lectern_tests::TestDatabase;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How often the balancer asks each process's `/readyz`, as a load balancer would.
pub(crate) const READINESS_EVERY: Duration = Duration::from_millis(100);
/// Each process's grace: well above the balancer's interval.
const GRACE_MS: &str = "1500";
/// Rate limits out of reach: this client sends hundreds of requests a second.
const NO_LIMITS: [(&str, &str); 2] =
    [("LECTERN_RATE_LIMIT_PER_MINUTE", "60000000"), ("LECTERN_RATE_LIMIT_BURST", "1000000")];

/// What the client saw.
#[derive(Debug, Default)]
struct Seen {
    /// Answered with 200, per process.
    served: [u64; 2],
    /// Connections refused (each then retried on the other process).
    refused: Vec<String>,
    /// Anything else: a failed retry, another failure, a status other than 200.
    errors: Vec<String>,
}

/// A load balancer and its client in one: each request goes to a process whose `/readyz`
/// answered 200 at its last check, taking turns; a refused connection is retried once on
/// the other process.
struct Balancer {
    ready: Arc<[AtomicBool; 2]>,
    stop: CancellationToken,
    checker: JoinHandle<()>,
    client: JoinHandle<Seen>,
}

impl Balancer {
    fn start(addresses: [String; 2], key: String) -> Self {
        let ready = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let stop = CancellationToken::new();
        // Idle connections expire before a stopping process closes them, as a load
        // balancer's would; the test is about refusals, not about reusing a closed socket.
        let http = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_millis(300))
            .timeout(Duration::from_secs(5))
            .build()
            .expect("an HTTP client");
        let checker = tokio::spawn(check_readiness(http.clone(), addresses.clone(), ready.clone(), stop.clone()));
        let client = tokio::spawn(send_requests(http, addresses, key, ready.clone(), stop.clone()));
        Self { ready, stop, checker, client }
    }

    async fn wait_until_ready(&self, index: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !self.ready[index].load(Ordering::Acquire) {
            assert!(tokio::time::Instant::now() < deadline, "process {index} never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) -> Seen {
        self.stop.cancel();
        self.checker.await.expect("the readiness checker");
        self.client.await.expect("the client")
    }
}

/// Marks each process ready or not from its public `/readyz` every [`READINESS_EVERY`], as a
/// load balancer would, until `stop`.
pub(crate) async fn check_readiness(
    http: reqwest::Client,
    addresses: [String; 2],
    ready: Arc<[AtomicBool; 2]>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        for (index, address) in addresses.iter().enumerate() {
            let answer = http.get(format!("http://{address}/readyz")).timeout(READINESS_EVERY * 2).send().await;
            ready[index].store(answer.is_ok_and(|answer| answer.status() == 200), Ordering::Release);
        }
        tokio::time::sleep(READINESS_EVERY).await;
    }
}

async fn send_requests(
    http: reqwest::Client,
    addresses: [String; 2],
    key: String,
    ready: Arc<[AtomicBool; 2]>,
    stop: CancellationToken,
) -> Seen {
    let mut seen = Seen::default();
    let mut turn = 0;
    while !stop.is_cancelled() {
        turn = (turn + 1) % 2;
        let Some(target) = [turn, 1 - turn].into_iter().find(|index| ready[*index].load(Ordering::Acquire)) else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let send = |index: usize| {
            http.get(format!("http://{}/v1/contacts", addresses[index])).header("X-API-Key", &key).send()
        };
        let (index, answer) = match send(target).await {
            Err(error) if error.is_connect() => {
                seen.refused.push(format!("process {target}: {error}"));
                (1 - target, send(1 - target).await)
            }
            answer => (target, answer),
        };
        match answer {
            Ok(answer) if answer.status() == 200 => seen.served[index] += 1,
            Ok(answer) => seen.errors.push(format!("process {index}: status {}", answer.status())),
            Err(error) => seen.errors.push(format!("process {index}: {error}")),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    seen
}

#[tokio::test]
async fn a_rolling_restart_of_two_processes_refuses_no_connection_and_fails_no_request() {
    let db = TestDatabase::create().await;
    let (_, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    let settings = [("LECTERN_SHUTDOWN_GRACE_MS", GRACE_MS), NO_LIMITS[0], NO_LIMITS[1]];
    let mut processes = [
        Some(Serve::on(&db.url).envs(&settings).start().await),
        Some(Serve::on(&db.url).envs(&settings).start().await),
    ];
    let addresses = processes.each_ref().map(|process| process.as_ref().expect("started").api.clone());
    let balancer = Balancer::start(addresses.clone(), key);
    balancer.wait_until_ready(0).await;
    balancer.wait_until_ready(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    for index in 0..2 {
        let stopping = processes[index].take().expect("running");
        stopping.stop().await;
        let listen = [("LECTERN_LISTEN", addresses[index].as_str())];
        processes[index] = Some(Serve::on(&db.url).envs(&settings).envs(&listen).start().await);
        balancer.wait_until_ready(index).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let seen = balancer.stop().await;

    assert!(seen.refused.is_empty(), "connections refused during the rolling restart: {:?}", seen.refused);
    assert!(seen.errors.is_empty(), "requests failed during the rolling restart: {:?}", seen.errors);
    assert!(seen.served.iter().all(|served| *served > 50), "a process served (almost) nothing: {:?}", seen.served);
}

#[tokio::test]
async fn after_sigterm_both_listeners_say_not_ready_while_requests_are_still_served_then_it_exits() {
    let db = TestDatabase::create().await;
    let (_, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    let serve = Serve::on(&db.url).env("LECTERN_SHUTDOWN_GRACE_MS", "3000").start().await;
    let http = reqwest::Client::new();
    let status = |url: String| {
        let request = http.get(url).header("X-API-Key", key.as_str());
        async move { request.send().await.map(|answer| answer.status().as_u16()) }
    };
    assert_eq!(status(serve.operations_url("/readyz")).await.ok(), Some(200));

    let stopped_at = tokio::time::Instant::now();
    serve.signal_stop();
    let deadline = stopped_at + Duration::from_secs(2);
    // Asked within the grace: not ready on either listener, and still serving, on
    // connections made after the signal.
    loop {
        let answers = (
            status(serve.operations_url("/readyz")).await.ok(),
            status(serve.api_url("/readyz")).await.ok(),
            status(serve.api_url("/v1/contacts")).await.ok(),
        );
        if answers == (Some(503), Some(503), Some(200)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "within the grace after SIGTERM: {answers:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = http.get(serve.operations_url("/readyz")).send().await.expect("readyz within the grace");
    let body: serde_json::Value = ready.json().await.expect("readyz's JSON");
    assert!(body.to_string().contains("shutting down"), "readiness does not say why: {body}");

    let ended = serve.ended().await;
    assert!(stopped_at.elapsed() >= Duration::from_millis(2_900), "it stopped before its grace ended");
    assert!(
        ended.stderr.contains("still serving until the grace period ends"),
        "no log line for the grace:\n{}",
        ended.stderr
    );
}

/// Rule: during the shutdown grace, a request that was waiting is answered at once (200,
/// empty, its token), a request without `wait` is served, and a request that would begin
/// to wait is a 503 `SERVICE_UNAVAILABLE` with `Retry-After`, so that a client looping on
/// `?since=<token>&wait=30` (and honouring `Retry-After`) asks a few times, not hundreds.
#[tokio::test]
async fn a_long_poll_arriving_during_the_grace_is_sent_elsewhere_so_the_documented_loop_never_spins() {
    let db = TestDatabase::create().await;
    let (_, key) = create_key(&db.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
    let serve = Serve::on(&db.url).env("LECTERN_SHUTDOWN_GRACE_MS", "3000").start().await;
    let http = reqwest::Client::new();
    let get = |query: String| {
        let request =
            http.get(serve.api_url(&format!("/v1/contacts/changes{query}"))).header("X-API-Key", key.as_str());
        async move { request.send().await.expect("the feed answers") }
    };
    let latest: serde_json::Value = get("?since=latest".to_owned()).await.json().await.expect("a page");
    let token = latest["syncToken"].as_str().expect("a token").to_owned();
    let waiting = tokio::spawn(get(format!("?since={token}&wait=30")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the request does not wait");

    let stopped_at = tokio::time::Instant::now();
    serve.signal_stop();

    let waited = waiting.await.expect("the waiting request");
    assert!(stopped_at.elapsed() < Duration::from_secs(1), "the waiting request was held into the grace");
    assert_eq!(waited.status(), 200);
    let page: serde_json::Value = waited.json().await.expect("a page");
    assert_eq!((page["data"].as_array().map(Vec::len), page["hasMore"].as_bool()), (Some(0), Some(false)), "{page}");

    let arrived = get(format!("?since={token}&wait=30")).await;
    assert_eq!(arrived.status(), 503, "a request that would wait during the grace");
    assert_eq!(arrived.headers().get("retry-after").and_then(|value| value.to_str().ok()), Some("1"));
    let refusal: serde_json::Value = arrived.json().await.expect("the error envelope");
    assert_eq!(refusal["error"]["code"], "SERVICE_UNAVAILABLE", "{refusal}");
    assert!(refusal["error"]["message"].as_str().is_some_and(|text| text.contains("shutting down")), "{refusal}");
    assert_eq!(get(format!("?since={token}")).await.status(), 200, "a request without wait is still served");

    // The documented loop for the rest of the grace, `Retry-After` honoured.
    let mut requests = 0;
    while stopped_at.elapsed() < Duration::from_millis(2_500) {
        requests += 1;
        let answer = get(format!("?since={token}&wait=30")).await;
        let retry_after = answer.headers().get("retry-after").and_then(|value| value.to_str().ok()?.parse().ok());
        tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(0))).await;
    }
    assert!(requests <= 3, "the client asked {requests} times in the grace's last two seconds");
    serve.ended().await;
}
