//! The SQL statements a test's app sends, as sqlx reports them (`sqlx::query` tracing
//! events). `#[tokio::test]` runs the app's tasks on the test's own thread, so the
//! recorder installed for the test sees the app's statements.
//!
//! `tracing` decides once per callsite whether anyone listens, and while exactly one
//! subscriber is registered it asks only the subscriber of the thread that reaches the
//! callsite first. Had another test's thread (which has no recorder) reached one of
//! sqlx's callsites first while a single recorder was alive, that callsite would stay
//! silent for every recorder; a second subscriber kept registered for good makes
//! `tracing` ask all of them.

use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::subscriber::NoSubscriber;
use tracing::Dispatch;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

#[derive(Clone, Default)]
pub(crate) struct Statements(Arc<Mutex<Vec<Statement>>>);

/// One statement as sqlx reported it.
#[derive(Debug, Default)]
pub(crate) struct Statement {
    pub(crate) text: String,
    pub(crate) rows_returned: u64,
}

impl Statements {
    /// The text of every statement sent since the last take (and forgets them).
    pub(crate) fn take(&self) -> Vec<String> {
        self.take_with_rows().into_iter().map(|statement| statement.text).collect()
    }

    pub(crate) fn take_with_rows(&self) -> Vec<Statement> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    /// Key lookups sent since the last take (and forgets everything sent).
    pub(crate) fn take_key_lookups(&self) -> Vec<String> {
        self.take().into_iter().filter(|text| text.contains("from api_keys where id")).collect()
    }
}

struct Recorder(Statements);

impl Visit for Statement {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" || (field.name() == "db.statement" && !value.is_empty()) {
            self.text = value.to_owned();
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "rows_returned" {
            self.rows_returned = value;
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        let mut statement = Statement::default();
        event.record(&mut statement);
        // Background work on no request's path: the flush of last-used times, the feed
        // bound's sampler (it samples on a timer until the app's listener is up, which can
        // be just after a test's key is cached), and the webhook deliverer's claim rounds
        // (every few seconds, endpoints or not). And a connection's setup: a new connection
        // asks which history of the database it reached, once.
        let background = ["last_used_at", "read_model_feed_bound", "read_model_server_history", "webhook_"];
        if !background.iter().any(|text| statement.text.contains(text)) {
            self.0 .0.lock().unwrap().push(statement);
        }
    }
}

/// Records the statements sent while the returned guard lives (on this thread).
pub(crate) fn record_statements() -> (Statements, tracing::subscriber::DefaultGuard) {
    static NEVER_THE_ONLY_ONE: OnceLock<Dispatch> = OnceLock::new();
    NEVER_THE_ONLY_ONE.get_or_init(|| Dispatch::new(NoSubscriber::default()));
    let statements = Statements::default();
    let recorder =
        Recorder(statements.clone()).with_filter(Targets::new().with_target("sqlx::query", tracing::Level::TRACE));
    (statements, tracing::subscriber::set_default(Registry::default().with(recorder)))
}
