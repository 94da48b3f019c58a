//! Schemathesis (PyPI) against the OpenAPI document the real server serves, through
//! `scripts/schemathesis.sh`: thousands of generated requests, and every answer must
//! be documented (status, content type, headers, body schema) and never a 5xx; the
//! document's own parameter examples among them.
//!
//! The script needs python3 and PyPI (once, for its venv under `target/`). Without
//! them this test fails with the script's message: it never passes without running.

use std::time::Duration;

use crate::support::{reported_count, run_script};

/// Installing schemathesis the first time plus both runs, on a small shared machine.
const WITHIN: Duration = Duration::from_secs(900);

#[tokio::test]
async fn schemathesis_finds_no_server_error_or_undocumented_response() {
    let stdout = run_script("schemathesis.sh", WITHIN).await;

    let total = reported_count(&stdout, "schemathesis.sh", " test cases in total");
    assert!(total >= 2_000, "only {total} cases were generated:\n{stdout}");
    // The document's parameter examples are sent too, not only generated values.
    let from_examples = reported_count(&stdout, "schemathesis.sh", " cases in the examples phase");
    assert!(from_examples > 0, "the examples phase sent no case:\n{stdout}");
}
