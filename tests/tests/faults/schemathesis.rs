//! Schemathesis (PyPI) against the OpenAPI document the real server serves, through
//! `scripts/schemathesis.sh`: thousands of generated requests, and every answer must
//! be documented (status, content type, headers, body schema) and never a 5xx.
//!
//! The script needs python3 and PyPI (once, for its venv under `target/`). Without
//! them this test fails with the script's message: it never passes without running.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lectern_tests::binaries::lectern_api;
use lectern_tests::database::admin_url;
use tokio::process::Command;

/// Installing schemathesis the first time plus both runs, on a small shared machine.
const WITHIN: Duration = Duration::from_secs(900);

#[tokio::test]
async fn schemathesis_finds_no_server_error_or_undocumented_response() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/schemathesis.sh");
    assert!(script.exists(), "{} is missing", script.display());
    let started = Instant::now();

    let run = Command::new("bash")
        .arg(&script)
        .env("LECTERN_API_BIN", lectern_api())
        .env("LECTERN_TEST_DATABASE_URL", admin_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(WITHIN, run)
        .await
        .unwrap_or_else(|_| panic!("scripts/schemathesis.sh did not finish within {WITHIN:?}"))
        .expect("run bash scripts/schemathesis.sh");

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/schemathesis.sh failed ({}, after {:?}); it needs python3 and PyPI for its venv.\n\
         stdout:\n{stdout}\nstderr:\n{stderr}",
        output.status,
        started.elapsed()
    );
    let total = stdout
        .lines()
        .find_map(|line| line.strip_prefix("schemathesis.sh: ")?.strip_suffix(" test cases in total"))
        .and_then(|count| count.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the script did not report its case count:\n{stdout}"));
    assert!(total >= 2_000, "only {total} cases were generated:\n{stdout}");
}
