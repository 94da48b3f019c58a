//! The hot path costs one SQL round trip: once a key is cached, a request sends exactly
//! one statement to PostgreSQL and never reads the key table.
//!
//! sqlx reports every statement it sends as a `sqlx::query` tracing event; these tests
//! record them. `#[tokio::test]` runs the app's tasks on the test's own thread, so the
//! recorder installed for the test sees the app's statements.

use std::sync::{Arc, Mutex};

use lectern_tests::{ContactSeed, TestApp, TestDatabase};
use tracing::field::{Field, Visit};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

#[derive(Clone, Default)]
pub(crate) struct Statements(Arc<Mutex<Vec<String>>>);

impl Statements {
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Recorder(Statements);

struct StatementText(String);

impl Visit for StatementText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" || (field.name() == "db.statement" && !value.is_empty()) {
            self.0 = value.to_owned();
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        let mut text = StatementText(String::new());
        event.record(&mut text);
        // The background flush of last-used times is not on any request's path.
        if !text.0.contains("last_used_at") {
            self.0 .0.lock().unwrap().push(text.0);
        }
    }
}

/// Records the statements sent while the returned guard lives (on this thread).
pub(crate) fn record_statements() -> (Statements, tracing::subscriber::DefaultGuard) {
    let statements = Statements::default();
    let recorder =
        Recorder(statements.clone()).with_filter(Targets::new().with_target("sqlx::query", tracing::Level::TRACE));
    (statements, tracing::subscriber::set_default(Registry::default().with(recorder)))
}

#[tokio::test]
async fn each_request_sends_exactly_one_statement_once_its_key_is_cached() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let id = ContactSeed::named("Acme GmbH").insert(&app.pool, workspace).await;
    lectern_tests::seed::insert_contacts(&app.pool, workspace, "Contact", 5).await;
    let first = app.get(&key, "/v1/contacts?limit=2").await;
    first.assert_ok();
    let cursor = lectern_tests::app::urlencode(first.body["page"]["nextCursor"].as_str().unwrap());
    statements.take();

    for path in [
        "/v1/contacts".to_owned(),
        format!("/v1/contacts?limit=2&cursor={cursor}"),
        "/v1/contacts?search=acme&sort=name&type=customer".to_owned(),
        format!("/v1/contacts/{id}"),
    ] {
        app.get(&key, &path).await.assert_ok();

        let sent = statements.take();
        assert_eq!(sent.len(), 1, "{path} sent {} statements: {sent:#?}", sent.len());
        assert!(!sent[0].contains("api_keys"), "{path} read the key table: {sent:?}");
    }
}

#[tokio::test]
async fn a_request_refused_for_its_parameters_sends_no_statement() {
    let (statements, _guard) = record_statements();
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    app.get(&key, "/v1/contacts").await.assert_ok();
    statements.take();

    app.get(&key, "/v1/contacts?limit=0&cursor=forged").await.assert_error(400, "VALIDATION_ERROR");

    assert_eq!(statements.take(), Vec::<String>::new());
}
