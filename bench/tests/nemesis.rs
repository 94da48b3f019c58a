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
use lectern_bench::nemesis::schedule::Schedule;
use lectern_bench::nemesis::{run, Outcome, Settings};

/// `schedules` schedules of `seed` (or the one `replay` names), each struck within `window`:
/// the violations found.
async fn violations(
    seed: u64,
    topology: Topology,
    replay: Option<&str>,
    schedules: u64,
    window: Duration,
) -> Vec<String> {
    run_checked(seed, topology, replay, schedules, window).await.0
}

/// [`violations`], and what the run did.
async fn run_checked(
    seed: u64,
    topology: Topology,
    replay: Option<&str>,
    schedules: u64,
    window: Duration,
) -> (Vec<String>, Outcome) {
    let replay = replay.map(|text| Schedule::parse(text).unwrap_or_else(|problem| panic!("{problem}")));
    let settings = Settings {
        seed,
        first_schedule: 0,
        replay,
        topology,
        run_for: Duration::from_secs(3_600),
        most_schedules: Some(schedules),
        window,
    };
    let outcome = run(&settings).await;
    assert_eq!(outcome.schedules, schedules);
    if let Some(replayed) = &settings.replay {
        let mut named = std::collections::BTreeMap::new();
        for step in &replayed.steps {
            *named.entry(step.fault).or_insert(0_u64) += 1;
        }
        assert_eq!(outcome.struck, named, "the run did not strike the schedule it was to replay");
    }
    assert!(outcome.events > 0, "the publisher published nothing");
    assert!(outcome.syncs > 0, "no client ever reached the feed's head");
    let found = outcome
        .violations
        .iter()
        .map(|violation| format!("seed {seed}, {}: {}", violation.schedule, violation.finding))
        .collect();
    (found, outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_seeded_nemesis_run_breaks_no_promise() {
    let found = violations(1, Topology::Single, None, 3, Duration::from_secs(8)).await;
    assert!(found.is_empty(), "{found:#?}");
}

/// The schedule that found the nemesis' first finding, struck again with the same seed's
/// publisher (a projector killed, one dump restored twice, a rebuild killed, while old
/// events are redelivered): on the restored database a redelivered older version was
/// applied before the ledger applied again the newer ones the dump lacked, and clients saw
/// records go back. It showed twice in two runs before the fix; whether it shows depends on
/// timing, so the rule's deterministic test is `tests/tests/faults/catch_up.rs`, and this
/// keeps the schedule in the short run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_older_version_is_not_served_after_a_restore() {
    let found = violations(
        2,
        Topology::Single,
        Some("0.756s projector-kill-9, 0.887s dump-restored-twice, 4.372s rebuild-killed"),
        1,
        Duration::from_secs(8),
    )
    .await;
    assert!(found.is_empty(), "{found:#?}");
}

/// The `scale` deployment (a three-node NATS cluster at R3, two projectors, an API process
/// reading from a replica) struck by what only it has: a NATS node lost, the replica held
/// behind, and one of the two projectors killed, overlapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_deployment_survives_a_node_loss_a_lagging_replica_and_a_projector_killed() {
    let found = violations(
        3,
        Topology::Scale,
        Some("0.500s nats-node-loss, 1.500s replica-lagging, 3.000s projector-kill-9"),
        1,
        Duration::from_secs(8),
    )
    .await;
    assert!(found.is_empty(), "{found:#?}");
}

/// A point-in-time restore of the primary to a moment a second or two back (a base backup,
/// then the WAL up to that point, promoted onto a new timeline) while clients follow the
/// feed: the restored database descends from the history the tokens name, so every client
/// continues from its token (a start-over here is a violation) and converges to the
/// listing, the events written after the point applied again by the projector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_in_time_restore_keeps_every_token() {
    let found = violations(
        4,
        Topology::Single,
        Some("0.500s point-in-time-restore, 7.000s api-kill-9"),
        1,
        Duration::from_secs(12),
    )
    .await;
    assert!(found.is_empty(), "{found:#?}");
}

/// The key pepper rotated as the operations guide says, across both API processes while
/// clients use their keys: the new pepper accepted everywhere, then hashed under, each a
/// rolling restart; once `keys list --pepper previous --pepper unrecorded --pepper unknown`
/// lists no key, the old pepper removed with a last rolling restart. No key is refused
/// (a 401 is a violation) and every key is hashed again within a minute (a finding if not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_pepper_rotation_refuses_no_key_and_retires_the_old_pepper() {
    let found = violations(5, Topology::Single, Some("0.500s key-pepper-rotation"), 1, Duration::from_secs(8)).await;
    assert!(found.is_empty(), "{found:#?}");
}

/// Events aged out of the stream while a standby lags, then a failover to that standby:
/// the events it missed can no longer be applied again, and the projector counts them as
/// lost (its alarm; without it this fails). Their records may stay behind, and only they:
/// every other record reaches its last version, every mirror equals the listing but for
/// those records, and `verify` says it cannot tell (exit 2) rather than agree. (The
/// publisher's later updates usually bring those records forward again within the window.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_aged_out_of_the_stream_are_lost_only_where_the_projector_counts_them() {
    let (found, outcome) =
        run_checked(6, Topology::Single, Some("0.500s stream-ages-events-out"), 1, Duration::from_secs(10)).await;
    assert!(found.is_empty(), "{found:#?}");
    assert!(
        outcome.lost_records > 0,
        "no event was counted lost: the projector took what the stream no longer held for held"
    );
}
