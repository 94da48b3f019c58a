//! The projector's two connections as operators see them: one log line when NATS or
//! PostgreSQL is lost and one when it is back (not one per retry), and the NATS
//! connection as a gauge (`lectern_projector_nats_connected`).
//!
//! The NATS half is wired into every connection [`crate::stream::connect`] makes; the
//! PostgreSQL half is told of each attempt by the running projector ([`crate::daemon`]).

use std::sync::atomic::{AtomicBool, Ordering};

use async_nats::{ConnectOptions, Event};
use lectern_runtime::database_check::why_no_connection;
use sqlx::PgPool;

/// `options` with the NATS connection's losses and returns logged and shown by the gauge.
/// async-nats reports a loss once ([`Event::Disconnected`]) and every connection made
/// ([`Event::Connected`]), the first one included.
pub fn watch_nats(options: ConnectOptions) -> ConnectOptions {
    crate::metrics::record_nats_connected(false);
    let lost = std::sync::Arc::new(AtomicBool::new(false));
    options.event_callback(move |event| {
        let lost = lost.clone();
        async move {
            match event {
                Event::Disconnected => {
                    crate::metrics::record_nats_connected(false);
                    lost.store(true, Ordering::Relaxed);
                    tracing::warn!("lost the connection to NATS; reconnecting (nothing is applied meanwhile)");
                }
                Event::Connected => {
                    crate::metrics::record_nats_connected(true);
                    if lost.swap(false, Ordering::Relaxed) {
                        tracing::info!("connected to NATS again");
                    }
                }
                _ => {}
            }
        }
    })
}

/// Whether PostgreSQL was last found lost. One flag for the process: a projector has one
/// database, and the flag only decides which log line is due.
static POSTGRES_LOST: AtomicBool = AtomicBool::new(false);

/// Notes an attempt on PostgreSQL (through `pool`) that failed: the first failure that
/// means the database cannot be reached (not a refused statement, nor a conflict worth a
/// retry) is logged. A pool that timed out does not say why, so then the cause is looked
/// for, once a loss, beside it.
pub async fn postgres_failed(pool: &PgPool, error: &sqlx::Error) {
    if !is_connection_error(error) || POSTGRES_LOST.load(Ordering::Relaxed) {
        return;
    }
    let cause = match error {
        sqlx::Error::PoolTimedOut => format!("{error}: {}", why_no_connection(pool).await),
        error => lectern_runtime::with_causes(error),
    };
    postgres_lost(&cause);
}

/// Notes that PostgreSQL gave no answer in time, for `cause`.
pub fn postgres_lost(cause: &str) {
    if !POSTGRES_LOST.swap(true, Ordering::Relaxed) {
        tracing::warn!(error = cause, "lost PostgreSQL; retrying (nothing is applied or acknowledged meanwhile)");
    }
}

/// Notes an attempt on PostgreSQL that worked: the first after a loss is logged.
pub fn postgres_answered() {
    if POSTGRES_LOST.swap(false, Ordering::Relaxed) {
        tracing::info!("PostgreSQL answers again");
    }
}

/// What an operator is told of a statement on `pool` that failed: PostgreSQL's own refusal
/// of a new connection rather than the pool's timeout, and `migrate` when the database has
/// no schema (it is reachable; it is only not ready).
pub async fn describe_failure(pool: &PgPool, error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::PoolTimedOut => format!("PostgreSQL is unreachable: {}", why_no_connection(pool).await),
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01") => {
            "the database has no schema yet (run `lectern-api migrate`)".to_owned()
        }
        error if is_connection_error(error) => {
            format!("PostgreSQL is unreachable: {}", lectern_runtime::with_causes(error))
        }
        error => format!("PostgreSQL refused a statement: {}", lectern_runtime::with_causes(error)),
    }
}

/// A failure to reach PostgreSQL or to keep a session with it, as opposed to a statement
/// it refused.
fn is_connection_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // 08: connection exceptions; 57P: the server shutting down or starting; 53300:
        // too many connections.
        sqlx::Error::Database(db) => {
            db.code().is_some_and(|code| code.starts_with("08") || code.starts_with("57P") || code == "53300")
        }
        _ => false,
    }
}
