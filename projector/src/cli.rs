//! The `lectern-projector` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Lectern's projector: change events from NATS JetStream into the read model.
#[derive(Debug, Parser)]
#[command(name = "lectern-projector", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume change events into the read model (not built yet).
    Run,
}

pub fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run => {
            eprintln!("error: lectern-projector run is not built yet (see the projector issue); nothing was consumed");
            ExitCode::FAILURE
        }
    }
}
