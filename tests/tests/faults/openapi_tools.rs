//! The served OpenAPI document, checked with the tools integrators use on it, through
//! `scripts/openapi-tools.sh`: openapi-spec-validator on the served and the committed
//! document, openapi-python-client generating a client with no warning, mypy --strict and
//! tsc --strict (on openapi-typescript's types) accepting a feed mirror that stores an
//! upserted entry's record as a contact, and the generated client walking every page of
//! contacts and items (and provoking 400, 401, 403, 404) while openapi-core validates each
//! exchange against the served document.
//!
//! The script needs python3 and PyPI, npm and its registry (once, for its tools under
//! `target/`). Without them this test fails with the script's message: it never passes
//! without running.

use std::time::Duration;

use crate::support::{reported_count, run_script};

/// Installing the tools the first time (about two minutes here) plus the run (about
/// twenty seconds), on a small shared machine.
const WITHIN: Duration = Duration::from_secs(600);

#[tokio::test]
async fn generated_python_client_reads_every_response_and_each_matches_the_document() {
    let stdout = run_script("openapi-tools.sh", WITHIN).await;

    // Eight or more pages of each listing in two sorts, filtered and searched pages,
    // retrieves and the errors: far more than 40 exchanges, every one validated.
    for checked in ["mypy --strict accepts", "tsc --strict accepts"] {
        assert!(stdout.contains(checked), "the script did not report {checked:?}:\n{stdout}");
    }
    let validated = reported_count(&stdout, "openapi-tools.sh", " responses validated against the served document");
    assert!(validated >= 40, "only {validated} responses were validated:\n{stdout}");
}
