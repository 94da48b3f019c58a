//! Operational conventions both binaries must share, so operators see one service:
//! the log format switch and which database failures are worth retrying.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Logs to stderr (stdout stays for command output): `RUST_LOG` filters (else
/// `default_filter`), `LECTERN_LOG_FORMAT=json` switches to JSON lines, colour only on a
/// terminal.
pub fn init_logging(default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let json = std::env::var("LECTERN_LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second initialisation (tests building several apps) keeps the first one.
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}

/// Failures that mean "PostgreSQL cannot do this now" (retry, or answer 503) rather
/// than "never" (a bug, or a refusal).
pub fn is_transient_database_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection exceptions; 53: insufficient resources (too many
            // connections); 57P: shutdown / cannot connect now; 57014: statement
            // timeout; 40: serialization failure or deadlock.
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "57014"
                || code.starts_with("40")
        }),
        _ => false,
    }
}
