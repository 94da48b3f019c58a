//! The SQL statements a test's app sends, as sqlx reports them (`sqlx::query` tracing
//! events). `#[tokio::test]` runs the app's tasks on the test's own thread, so the
//! recorder installed for the test sees the app's statements.

use std::sync::{Arc, Mutex};

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

    /// Key lookups sent since the last take (and forgets everything sent).
    pub(crate) fn take_key_lookups(&self) -> Vec<String> {
        self.take().into_iter().filter(|text| text.contains("from api_keys where id")).collect()
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
