//! What delivers webhooks in these tests: the app in process, and real `serve` processes,
//! with waits short enough for a test.

use std::time::Duration;

use lectern_api::webhooks::{TargetPolicy, WebhookSettings};
use lectern_tests::app::AppOptions;
use lectern_tests::serve::{Serve, ServeOptions};
use lectern_tests::{TestApp, TestDatabase};

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

/// `serve` against `database_url` with leases of 600 ms, so that it claims endpoints, and
/// refreshes what readiness says about them, within a fraction of a second. Private
/// targets are allowed only where the test says so.
pub fn serve(database_url: &str) -> ServeOptions {
    Serve::on(database_url).webhook_lease_ms(600)
}
