//! A command's edges, the same in both binaries: it stops on a signal, and writes its
//! output to stdout.

use std::io::Write;

use tokio_util::sync::CancellationToken;

/// Cancels `token` on Ctrl-C or SIGTERM, logging `stopping` (what the process finishes
/// before it exits); returns without it when `token` is cancelled otherwise.
pub async fn cancel_on_signal(token: CancellationToken, stopping: &'static str) {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
        () = token.cancelled() => return,
    }
    tracing::info!("{stopping}");
    token.cancel();
}

/// Writes `text` to stdout, flushed: a command's output.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush())
}
