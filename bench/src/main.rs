//! `lectern-bench`: the reproducible benchmark (see the library's docs).
//!
//! `cargo run --release -p lectern-bench -- [--scale small|full] [--contacts N] [--output FILE]`

use std::process::ExitCode;

use lectern_bench::{self as bench, Options};

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1).collect()) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{}", bench::options::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            eprintln!("error: {problem}");
            return ExitCode::from(2);
        }
    };
    match bench::run(options).await {
        Ok(markdown) => {
            println!("{markdown}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
