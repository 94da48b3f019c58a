//! The `lectern-dev` command line: the whole stack by default; `publish-demo` for a
//! stack that runs its parts apart (Docker Compose's `demo` service).

use clap::{Parser, Subcommand};
use lectern_fixtures::demo::DEMO_WORKSPACE;
use uuid::Uuid;

use crate::error::DevError;
use crate::stack::StackArgs;

/// Lectern on this machine in one command: migrations, the projector, the demo data
/// published through NATS, a fresh key, the API.
#[derive(Debug, Parser)]
#[command(name = "lectern-dev", version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    stack: StackArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Publish the demo workspace's events to NATS and exit; does nothing once published.
    PublishDemo(PublishDemoArgs),
}

#[derive(Clone, Debug, clap::Args)]
struct PublishDemoArgs {
    /// NATS server (with JetStream) to publish to.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Workspace the demo records belong to; by default the one the stack issues its key for.
    #[arg(long, env = "LECTERN_DEMO_WORKSPACE", default_value_t = DEMO_WORKSPACE)]
    workspace: Uuid,
}

/// Parses the command line (exit 2 on bad usage), runs the command, and prints any
/// failure as one line (exit 1).
pub fn main() -> std::process::ExitCode {
    let cli: Cli = lectern_runtime::parse_args();
    lectern_runtime::init_logging("info,async_nats=warn");
    lectern_api::memory::keep_heap_in_small_pages();
    lectern_runtime::run_command(run(cli))
}

async fn run(cli: Cli) -> Result<(), DevError> {
    match cli.command {
        None => crate::stack::run(cli.stack).await,
        Some(Command::PublishDemo(args)) => {
            let client = crate::stack::connect_nats(&args.nats_url).await?;
            let outcome = crate::publish::publish_demo(&async_nats::jetstream::new(client), args.workspace).await?;
            lectern_api::cli::write_stdout(&format!("{outcome}\n"))?;
            Ok(())
        }
    }
}
