//! The nemesis' short seeded run, so every change meets it: a few schedules of faults drawn
//! from fixed seeds against the private deployment (this build's binaries), each checked
//! against every promise. The long run is the benchmark's (`lectern-bench --nemesis`).
//!
//! The rule: no schedule breaks a promise: every acknowledged event at its last version in
//! the listing, every client's mirror equal to the listing, no record going back in a
//! mirror, no start-over without a fault that forks the history, no 500, no process
//! crashing, `verify` agreeing with the stream.

use std::time::Duration;

use lectern_bench::nemesis::faults::Topology;
use lectern_bench::nemesis::{run, Settings};

/// The schedules of `seed`, the first `schedules` of them, each struck within 8 s.
async fn violations(seed: u64, schedules: u64) -> Vec<String> {
    let settings = Settings {
        seed,
        topology: Topology::Single,
        run_for: Duration::from_secs(3_600),
        most_schedules: Some(schedules),
        window: Duration::from_secs(8),
    };
    let outcome = run(&settings).await;
    assert_eq!(outcome.schedules, schedules);
    assert!(outcome.events > 0, "the publisher published nothing");
    assert!(outcome.syncs > 0, "no client ever reached the feed's head");
    outcome
        .violations
        .iter()
        .map(|violation| format!("seed {seed}, {}: {}", violation.schedule, violation.finding))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_seeded_nemesis_run_breaks_no_promise() {
    let found = violations(1, 3).await;
    assert!(found.is_empty(), "{found:#?}");
}

/// The nemesis' first finding, replayed: seed 2's first schedule (a projector killed, one
/// dump restored twice, a rebuild killed) while the publisher redelivers old events. On the
/// restored database a redelivered older version is applied before the ledger applies
/// again the newer ones the dump lacks, and clients that had the newer one see the record
/// go back. Open: see the closing note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open finding of the nemesis: an older version served after a restore, before the ledger catches up"]
async fn a_redelivered_older_version_is_not_served_after_a_restore() {
    let found = violations(2, 1).await;
    assert!(found.is_empty(), "{found:#?}");
}
