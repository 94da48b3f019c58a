//! The `lectern-projector` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    lectern_projector::cli::main()
}
