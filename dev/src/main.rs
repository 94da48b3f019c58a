//! The `lectern-dev` binary; everything lives in the library so tests can use it.

/// The allocator `lectern-api` runs with, so the stack behaves as the API does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    lectern_dev::cli::main()
}
