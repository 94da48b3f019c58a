//! `lectern-runtime`: what both of Lectern's binaries run on, so that operators see one
//! service: the log format switch, which database failures are worth retrying, the
//! command runner, stopping on a signal and writing output, the operations listener
//! (metrics, health, readiness) and the `healthcheck` probe.
//!
//! # Layout
//! - [`database_check`]: a readiness probe's statement, and why PostgreSQL did not answer it.
//! - [`json_log`]: log lines as JSON, written without an intermediate value.
//! - [`probe`]: the `healthcheck` command's request to a readiness endpoint.
//! - [`process`]: a command's edges: stopping on a signal, writing its output.
//! - [`server`]: the operations listener: `/metrics`, `/healthz`, `/readyz`.

pub mod database_check;
pub mod json_log;
pub mod probe;
pub mod process;
pub mod server;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `url`, one NATS server or a comma-separated list of them, with each server's user,
/// password or token replaced: an error line may end up in a log or a ticket.
pub fn nats_servers_without_credentials(url: &str) -> String {
    let server = |server: &str| match server.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://REDACTED@{host}"),
            None => format!("REDACTED@{host}"),
        },
        None => server.to_owned(),
    };
    url.split(',').map(server).collect::<Vec<_>>().join(",")
}

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
    let _ = if json { builder.json().event_format(json_log::JsonLines::new()).try_init() } else { builder.try_init() };
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
            // timeout; 40: serialization failure or deadlock; LR001: the read model's
            // history has not yet taken back what a failover or a restore made it forget.
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "57014"
                || code.starts_with("40")
                || code == "LR001"
        }),
        _ => false,
    }
}

/// Parses the command line. Usage errors are one line on stderr, naming the flag and
/// its environment variable, with exit code 2; help and version print as usual.
pub fn parse_args<T: clap::Parser>() -> T {
    use clap::error::{ContextKind, ErrorKind};

    match T::try_parse() {
        Ok(parsed) => parsed,
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            error.exit()
        }
        Err(error) => {
            let rendered = error.render().to_string();
            let mut line = rendered
                .lines()
                .map(str::trim)
                .filter(|text| !text.is_empty() && !text.starts_with("For more information"))
                .collect::<Vec<_>>()
                .join(" ");
            let flag = error.get(ContextKind::InvalidArg).map(|arg| arg.to_string());
            if let Some(env) = flag.as_deref().and_then(environment_twin::<T>) {
                line.push_str(&format!(" (environment variable {env})"));
            }
            eprintln!("{line}");
            std::process::exit(error.exit_code())
        }
    }
}

/// The environment variable of the flag named in `invalid_arg` (e.g. `--listen <LISTEN>`).
fn environment_twin<T: clap::CommandFactory>(invalid_arg: &str) -> Option<String> {
    let long = invalid_arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let mut command = T::command();
    command.build();
    let mut pending = vec![command];
    while let Some(command) = pending.pop() {
        if let Some(arg) = command.get_arguments().find(|arg| arg.get_long() == Some(long)) {
            if let Some(env) = arg.get_env() {
                return Some(env.to_string_lossy().into_owned());
            }
        }
        pending.extend(command.get_subcommands().cloned());
    }
    None
}

/// Runs a command to completion on a multi-threaded runtime; a failure is printed as
/// one line on stderr, with its cause chain, and exits 1.
pub fn run_command<E: std::error::Error>(
    work: impl std::future::Future<Output = Result<(), E>>,
) -> std::process::ExitCode {
    run_command_exiting(async { work.await.map(|()| std::process::ExitCode::SUCCESS) }, std::process::ExitCode::FAILURE)
}

/// Runs a command that chooses its own exit code; a failure is printed as
/// [`run_command`] prints it, and exits `on_error` (a command whose codes say what it
/// found exits "could not tell" when it could not look).
pub fn run_command_exiting<E: std::error::Error>(
    work: impl std::future::Future<Output = Result<std::process::ExitCode, E>>,
    on_error: std::process::ExitCode,
) -> std::process::ExitCode {
    run_on(tokio::runtime::Builder::new_multi_thread(), work, on_error)
}

/// [`run_command`] on a runtime whose worker threads call `on_idle` each time they run
/// out of work (the API hands freed memory back to the system there). `on_idle` returns
/// `false` when it put its work off (done too recently); every worker is then woken once
/// `retry_after` has passed, so that one that stays idle does the work then.
pub fn run_command_idling<E: std::error::Error>(
    work: impl std::future::Future<Output = Result<(), E>>,
    on_idle: fn() -> bool,
    retry_after: std::time::Duration,
) -> std::process::ExitCode {
    let put_off = std::sync::Arc::new(tokio::sync::Notify::new());
    let noted = put_off.clone();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.on_thread_park(move || {
        if !on_idle() {
            noted.notify_one();
        }
    });
    let work = async move {
        let reminder = tokio::spawn(wake_workers_that_put_off(put_off, retry_after));
        let outcome = work.await;
        reminder.abort();
        outcome.map(|()| std::process::ExitCode::SUCCESS)
    };
    run_on(builder, work, std::process::ExitCode::FAILURE)
}

/// Each time a worker puts its idle work off: waits `retry_after`, then gives every worker
/// a task that does nothing, so that each runs out of work again and does it.
async fn wake_workers_that_put_off(put_off: std::sync::Arc<tokio::sync::Notify>, retry_after: std::time::Duration) {
    loop {
        put_off.notified().await;
        tokio::time::sleep(retry_after).await;
        for _ in 0..tokio::runtime::Handle::current().metrics().num_workers() {
            drop(tokio::spawn(async {}));
        }
    }
}

fn run_on<E: std::error::Error>(
    mut builder: tokio::runtime::Builder,
    work: impl std::future::Future<Output = Result<std::process::ExitCode, E>>,
    on_error: std::process::ExitCode,
) -> std::process::ExitCode {
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            return on_error;
        }
    };
    match runtime.block_on(work) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            on_error
        }
    }
}

/// An error and its causes on one line, without repeating a cause already quoted.
fn one_line(error: &dyn std::error::Error) -> String {
    with_causes(error).replace('\n', " ")
}

/// `error`, then each of its sources after a colon, skipping one its text already quotes.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::nats_servers_without_credentials;

    #[test]
    fn a_nats_url_is_named_without_its_credentials() {
        assert_eq!(nats_servers_without_credentials("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(
            nats_servers_without_credentials("nats://user:secret@a:4222,tls://token@b:4222,c:4222"),
            "nats://REDACTED@a:4222,tls://REDACTED@b:4222,c:4222"
        );
        assert_eq!(nats_servers_without_credentials("secret@a:4222"), "REDACTED@a:4222");
    }
}
