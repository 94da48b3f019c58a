//! What the retry, target and command-line tests share: apps and `serve` processes with
//! short webhook waits, a bare TCP listener that counts connections, and polling the
//! delivery log.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lectern_api::webhooks::{TargetPolicy, WebhookSettings};
use lectern_tests::app::AppOptions;
use lectern_tests::binaries::{lectern_api, Run};
use lectern_tests::process::{run_to_end, Ended, Metrics, Service};
use lectern_tests::seed::TEST_PEPPER;
use lectern_tests::webhooks::Delivery;
use lectern_tests::{Reply, TestApp, TestDatabase};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::support::COMMAND_TIMEOUT;

/// How long a `serve` process may take to start or stop.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// Webhook settings with waits short enough for tests: private targets allowed (the
/// receivers listen on loopback), `first_retry` and `timeout` as given, retries for an
/// hour (no test reaches it unless it asks to).
pub fn settings(first_retry: Duration, timeout: Duration) -> WebhookSettings {
    WebhookSettings {
        policy: TargetPolicy { allow_private: true },
        timeout,
        first_retry,
        retry_for: Duration::from_secs(3600),
        ..WebhookSettings::default()
    }
}

/// An in-process app delivering webhooks with `webhooks`.
pub async fn app(db: &TestDatabase, webhooks: WebhookSettings) -> TestApp {
    TestApp::spawn_with(db.pool.clone(), AppOptions { webhooks, ..AppOptions::default() }).await
}

/// `lectern-api webhooks <args>` with the tests' pepper and nothing else: private targets
/// are NOT allowed, as on an operator's machine that never set the flag.
pub async fn webhooks_strict(database_url: &str, args: &[&str]) -> Run {
    let mut all = vec!["webhooks"];
    all.extend_from_slice(args);
    let env = [("DATABASE_URL", database_url), ("LECTERN_KEY_PEPPER", TEST_PEPPER)];
    run_to_end(&lectern_api(), &all, &env, COMMAND_TIMEOUT).await
}

/// The log entry of `delivery` in `webhooks deliveries`.
pub fn entry<'a>(log: &'a [Value], delivery: &str) -> &'a Value {
    log.iter().find(|entry| entry["id"] == delivery).unwrap_or_else(|| panic!("{delivery} is not in the log: {log:#?}"))
}

/// Polls `webhooks deliveries <endpoint>` until `enough` holds for the log, or panics
/// after `within`.
pub async fn wait_for_log(
    database_url: &str,
    endpoint: Uuid,
    within: Duration,
    what: &str,
    enough: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let log = crate::support::deliveries(database_url, endpoint).await;
        if enough(&log) {
            return log;
        }
        assert!(Instant::now() < deadline, "{what} not within {within:?}; log: {log:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `webhooks list --output json`, the entry of `endpoint`.
pub async fn listed(database_url: &str, endpoint: Uuid) -> Value {
    let list = crate::support::list(database_url).await;
    list.into_iter()
        .find(|listed| listed["id"] == endpoint.to_string())
        .unwrap_or_else(|| panic!("{endpoint} is not listed"))
}

/// When an arrival happened, on the clock PostgreSQL's timestamps use (the same machine's).
pub fn wall_clock(at: Instant) -> DateTime<Utc> {
    let elapsed = chrono::Duration::from_std(at.elapsed()).unwrap_or_else(|_| chrono::Duration::zero());
    Utc::now() - elapsed
}

/// A timestamp of the delivery log.
pub fn timestamp(entry: &Value, field: &str) -> DateTime<Utc> {
    entry[field]
        .as_str()
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
        .unwrap_or_else(|| panic!("no {field} timestamp in {entry}"))
        .with_timezone(&Utc)
}

/// The time between consecutive arrivals.
pub fn gaps(deliveries: &[Delivery]) -> Vec<Duration> {
    deliveries.windows(2).map(|pair| pair[1].arrived.duration_since(pair[0].arrived)).collect()
}

/// A TCP listener on 127.0.0.1 that accepts connections, counts them and says nothing:
/// whether a sender connected at all (a TLS handshake never becomes a request a
/// [`lectern_tests::webhooks::Receiver`] would record).
pub struct ConnectionCounter {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl ConnectionCounter {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the counter");
        let port = listener.local_addr().expect("counter address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counting = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { port, accepted, task }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectionCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `lectern-api serve` on free ports against a test database, with the tests' pepper,
/// short webhook leases (so it claims endpoints and refreshes what readiness says about
/// them within a fraction of a second) and `env`.
pub struct Serve {
    pub service: Service,
    operations: String,
    http: reqwest::Client,
}

impl Serve {
    pub async fn start(database_url: &str, env: &[(&str, &str)]) -> Self {
        let mut all = vec![
            ("DATABASE_URL", database_url),
            ("LECTERN_LISTEN", "127.0.0.1:0"),
            ("LECTERN_METRICS_LISTEN", "127.0.0.1:0"),
            ("LECTERN_KEY_PEPPER", TEST_PEPPER),
            ("LECTERN_WEBHOOK_LEASE_MS", "600"),
        ];
        all.extend_from_slice(env);
        let mut service = Service::spawn(&lectern_api(), &["serve"], &all);
        let listening = service
            .wait_for_log(PROCESS_TIMEOUT, |record| record["fields"]["message"] == "lectern-api listening")
            .await;
        let operations = listening["fields"]["metrics"]
            .as_str()
            .unwrap_or_else(|| panic!("no metrics address in {listening}"))
            .to_owned();
        Self { service, operations, http: reqwest::Client::new() }
    }

    /// GET on the operations address.
    pub async fn operations(&self, path: &str) -> Reply {
        let url = format!("http://{}{path}", self.operations);
        Reply::read(self.http.get(url).send().await.expect("request reaches serve")).await
    }

    pub async fn metrics(&self) -> Metrics {
        let reply = self.operations("/metrics").await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        Metrics::parse(&reply.text)
    }

    /// SIGTERM, and exit 0 within the timeout.
    pub async fn stop(self) -> Ended {
        let ended = self.service.terminate(PROCESS_TIMEOUT).await;
        assert_eq!(ended.code, Some(0), "SIGTERM did not end serve with exit 0:\n{}", ended.stderr);
        ended
    }
}
