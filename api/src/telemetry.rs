//! Logging: `RUST_LOG` filters, `LECTERN_LOG_FORMAT=json` switches to JSON lines,
//! everything goes to stderr so command output on stdout stays machine-readable.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LECTERN_LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second initialisation (tests building several apps) keeps the first one.
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
