//! Where deliveries may go: without `LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS`, only https
//! URLs without credentials reaching public addresses, checked when an endpoint is
//! registered and again when a delivery connects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lectern_tests::seed::ContactSeed;
use lectern_tests::webhooks::{verify_with_standardwebhooks, Receiver};
use lectern_tests::TestDatabase;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::endpoints::{list, register, wait_for_log, webhooks, webhooks_strict};
use crate::senders::serve;

const WITHIN: Duration = Duration::from_secs(15);

/// Rule: `webhooks create` without the allow flag refuses plain http, loopback, private,
/// link-local and metadata addresses (written in the URL or resolved from its name) and
/// URLs carrying credentials: exit 1, one error line saying why, nothing stored, no
/// secret printed. With the flag, a loopback http URL is accepted.
#[tokio::test]
async fn webhooks_create_without_the_allow_flag_refuses_unsafe_urls_saying_why_and_stores_nothing() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4().to_string();
    for (url, why) in [
        ("http://example.com/hook", "is not an https URL"),
        ("https://127.0.0.1/hook", "127.0.0.1, a loopback address"),
        ("https://[::1]/hook", "::1, a loopback address"),
        ("https://10.0.0.1/hook", "10.0.0.1, a private address"),
        ("https://169.254.169.254/latest/meta-data", "169.254.169.254, a cloud metadata address"),
        ("https://localhost/hook", "localhost resolves to"),
        ("https://user:password@example.com/hook", "carries a user name or password"),
    ] {
        let run = webhooks_strict(
            &db.url,
            &["create", "--workspace", &workspace, "--url", url, "--resource", "contacts", "--output", "json"],
        )
        .await;
        run.assert_one_line_error(Some(1), &["refused webhook URL", why]);
        if url.contains("localhost") {
            assert!(run.stderr.contains("loopback address"), "{url}: {}", run.stderr);
        }
        assert!(!run.stdout.contains("whsec_") && !run.stderr.contains("whsec_"), "{url}: a secret was printed");
        let stored: i64 = sqlx::query_scalar("select count(*) from webhook_endpoints")
            .fetch_one(&db.pool)
            .await
            .expect("count the endpoints");
        assert_eq!(stored, 0, "{url} was stored");
    }
    let listed = webhooks_strict(&db.url, &["list", "--output", "json"]).await;
    listed.assert_success();
    assert_eq!(listed.json(), serde_json::json!([]), "nothing refused is listed");

    let accepted = webhooks(
        &db.url,
        &["create", "--workspace", &workspace, "--url", "http://127.0.0.1:9/hook", "--resource", "contacts"],
        &[],
    )
    .await;
    accepted.assert_success();
    assert!(accepted.stdout.contains("whsec_"), "{}", accepted.stdout);
    assert_eq!(list(&db.url).await.len(), 1);
}

/// Rule: the addresses are checked again when a delivery connects: a `serve` process
/// started without the allow flag sends nothing to an endpoint registered with it, be
/// it plain http to a name of this host, https to a name resolving to loopback (refused
/// by the resolver, before any connection, so before TLS) or https to a loopback
/// address written in the URL; each delivery stays pending with the refusal as its last
/// error. A process with the flag then delivers.
#[tokio::test]
async fn serve_without_the_allow_flag_never_connects_to_private_targets_and_serve_with_it_delivers() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let receiver = Receiver::start().await;
    let counter = ConnectionCounter::start().await;
    let port_and_path = receiver.url.rsplit(':').next().expect("receiver port and path").to_owned();
    let by_name = register(&db.url, workspace, &format!("http://localhost:{port_and_path}"), &["contacts"]).await;
    let tls_by_name =
        register(&db.url, workspace, &format!("https://localhost:{}/hook", counter.port), &["contacts"]).await;
    let tls_literal =
        register(&db.url, workspace, &format!("https://127.0.0.1:{}/hook", counter.port), &["contacts"]).await;
    let quick = [("LECTERN_WEBHOOK_FIRST_RETRY_MS", "100"), ("LECTERN_WEBHOOK_TIMEOUT_MS", "2000")];
    let strict = serve(&db.url).envs(&quick).start().await;

    ContactSeed::named("Refused Ltd").insert(&db.pool, workspace).await;

    let mut pending = None;
    for (endpoint, why) in [
        (&by_name, "is not an https URL"),
        (&tls_by_name, "localhost resolves to"),
        (&tls_literal, "127.0.0.1, a loopback address"),
    ] {
        let log = wait_for_log(&db.url, endpoint.id, WITHIN, "two refused attempts", |log| {
            log.first().is_some_and(|entry| entry["attempts"].as_i64() >= Some(2))
        })
        .await;
        assert_eq!(log[0]["state"], "pending", "{log:#?}");
        assert!(log[0]["lastStatus"].is_null(), "{log:#?}");
        let error = log[0]["lastError"].as_str().unwrap_or_default();
        assert!(error.contains(why), "the refusal {why:?} is the last error: {log:#?}");
        if endpoint.id == by_name.id {
            pending = log[0]["id"].as_str().map(str::to_owned);
        }
    }
    assert!(receiver.deliveries().is_empty(), "delivered without the flag: {:#?}", receiver.deliveries());
    assert_eq!(counter.accepted(), 0, "serve connected to loopback without the flag");
    strict.stop().await;

    let allowing = serve(&db.url).envs(&quick).private_webhook_targets().start().await;
    let deliveries = receiver.wait_for(WITHIN, "the delivery, now allowed", |d| !d.is_empty()).await;
    assert_eq!(Some(deliveries[0].id()), pending.as_deref(), "the pending delivery is the one sent");
    // The counter does see a process that may connect: its zero above meant something.
    let deadline = std::time::Instant::now() + WITHIN;
    while counter.accepted() == 0 {
        assert!(std::time::Instant::now() < deadline, "serve with the flag never connected to the counter");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    allowing.stop().await;
    verify_with_standardwebhooks(&deliveries, &[&by_name.secret]).await;
}

/// A TCP listener on 127.0.0.1 that accepts connections, counts them and says nothing:
/// whether a sender connected at all (a TLS handshake never becomes a request a
/// [`Receiver`] would record).
struct ConnectionCounter {
    port: u16,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl ConnectionCounter {
    async fn start() -> Self {
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

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectionCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}
