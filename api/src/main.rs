//! The `lectern-api` binary; everything lives in the library so tests can build it.

fn main() -> std::process::ExitCode {
    lectern_api::cli::main()
}
