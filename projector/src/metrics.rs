//! The projector's metrics, recorded where the work happens and served by the
//! operations listener (`--metrics-listen`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lectern_schema::ChangeEvent;

/// Metric names (one place, so docs/operations.md and tests agree).
pub mod names {
    pub const EVENTS_APPLIED: &str = "lectern_projector_events_applied_total";
    pub const EVENTS_DEAD_LETTERED: &str = "lectern_projector_events_dead_lettered_total";
    pub const BATCH_SIZE: &str = "lectern_projector_batch_size";
    pub const APPLY_DURATION: &str = "lectern_projector_apply_duration_seconds";
    pub const CONSUMER_LAG: &str = "lectern_projector_consumer_lag";
    pub const APPLY_RETRIES: &str = "lectern_projector_apply_retries_total";
    pub const FLUSH_WAIT: &str = "lectern_projector_flush_wait_seconds";
    pub const HANDED_BACK: &str = "lectern_projector_messages_handed_back_total";
    pub const APPLIED_AGAIN: &str = "lectern_projector_events_applied_again_total";
    pub const EVENTS_LOST: &str = "lectern_projector_events_lost_total";
    pub const LOST_UNACCEPTED: &str = "lectern_projector_lost_events";
    pub const HISTORY_CHANGES: &str = "lectern_projector_database_history_changes_total";
    pub const STUCK_BATCHES: &str = "lectern_projector_batches_stuck";
    pub const LAST_VERIFY_TIME: &str = "lectern_projector_last_verify_timestamp_seconds";
    pub const LAST_VERIFY_DRIFTED: &str = "lectern_projector_last_verify_drifted_records";
    pub const LAST_VERIFY_OUTCOME: &str = "lectern_projector_last_verify_outcome";
    pub const NATS_CONNECTED: &str = "lectern_projector_nats_connected";
    pub const DEAD_LETTERS: &str = "lectern_projector_dead_letters";
    pub const PUBLISH_TO_COMMIT: &str = lectern_runtime::server::PUBLISH_TO_COMMIT;
    pub const STREAM_BEHIND_SECONDS: &str = "lectern_projector_stream_behind_seconds";
    pub const STREAM_BEHIND_MESSAGES: &str = "lectern_projector_stream_behind_messages";
}

/// Counts a committed batch: applied events by type (`contact.created`, …), dead
/// letters by the entity their subject names.
pub fn record_committed<'a>(
    applied: impl Iterator<Item = &'a ChangeEvent>,
    dead_lettered: impl Iterator<Item = &'a str>,
) {
    let mut by_type: HashMap<String, u64> = HashMap::new();
    for event in applied {
        *by_type.entry(event.event_type.to_string()).or_default() += 1;
    }
    for (event_type, count) in by_type {
        metrics::counter!(names::EVENTS_APPLIED, "type" => event_type).increment(count);
    }
    for subject in dead_lettered {
        metrics::counter!(names::EVENTS_DEAD_LETTERED, "entity" => entity_of(subject)).increment(1);
    }
}

/// One batch's size and how long it took from pull to commit.
pub fn record_batch(messages: usize, elapsed: Duration) {
    metrics::histogram!(names::BATCH_SIZE).record(messages as f64);
    metrics::histogram!(names::APPLY_DURATION).record(elapsed.as_secs_f64());
}

/// Messages not yet delivered to any projector, at the last pull ([`record_lag`]).
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Messages the stream holds that the consumer has not delivered yet, as the last pull
/// saw it. The gauge adds the messages this process holds uncommitted ([`record_lag_now`]):
/// delivered is not applied, and a stalled batch is lag.
pub fn record_lag(pending: u64) {
    PENDING.store(pending, Ordering::Relaxed);
}

/// Sets the lag gauge: undelivered messages and the `in_hand` ones not yet committed.
pub fn record_lag_now(in_hand: u64) {
    metrics::gauge!(names::CONSUMER_LAG).set((PENDING.load(Ordering::Relaxed) + in_hand) as f64);
}

/// Every counter and gauge that alerting rules read, at 0 before anything happens: a rule
/// on `increase()` misses the first event of a series that appears with it, and one on a
/// gauge cannot fire on a series that does not exist.
pub fn start_at_zero() {
    for counter in
        [names::APPLIED_AGAIN, names::EVENTS_LOST, names::HISTORY_CHANGES, names::APPLY_RETRIES, names::HANDED_BACK]
    {
        metrics::counter!(counter).absolute(0);
    }
    for entity in ["contacts", "items", "other"] {
        metrics::counter!(names::EVENTS_DEAD_LETTERED, "entity" => entity).absolute(0);
    }
    record_lag_now(0);
    record_stuck_batches(0);
}

/// A batch that could not commit and is being retried.
pub fn record_retry() {
    metrics::counter!(names::APPLY_RETRIES).increment(1);
}

/// How long a batch's messages waited, after its commit, for the flush barrier that
/// let them be acknowledged.
pub fn record_flush_wait(waited: Duration) {
    metrics::histogram!(names::FLUSH_WAIT).record(waited.as_secs_f64());
}

/// Messages handed back for redelivery because no flush barrier could vouch for their
/// commit (the barrier's connection was lost).
pub fn record_handed_back(messages: usize) {
    metrics::counter!(names::HANDED_BACK).increment(messages as u64);
}

/// Events applied again because the database had lost them though JetStream saw them
/// acknowledged ([`crate::daemon::ledger`]).
pub fn record_applied_again(events: u64) {
    metrics::counter!(names::APPLIED_AGAIN).increment(events);
}

/// Acknowledged events found lost: the database did not hold them and the stream no
/// longer did ([`crate::lost_events`]).
pub fn record_lost(events: u64) {
    metrics::counter!(names::EVENTS_LOST).increment(events);
}

/// Lost events no operator has accepted yet (the table's, whichever process found them);
/// above 0, readiness is degraded.
pub fn record_lost_unaccepted(events: u64) {
    metrics::gauge!(names::LOST_UNACCEPTED).set(events as f64);
}

/// The database behind the address turned out to be another history than before.
pub fn record_history_change() {
    metrics::counter!(names::HISTORY_CHANGES).increment(1);
}

/// Batches in hand longer than the stuck bound ([`crate::daemon::stuck`]); above 0, events are
/// waiting that the consumer's lag does not count.
pub fn record_stuck_batches(batches: usize) {
    metrics::gauge!(names::STUCK_BATCHES).set(batches as f64);
}

/// The last `verify` recorded (any process's): when it finished (seconds since the
/// epoch), how many records had drifted, and its outcome (`agreed`, `drifted`,
/// `undecided`, `before_restore`) as a 1 among the outcomes' gauges. With no verify ever
/// finished: 0, 0 and every outcome 0, so that "the last verify is too old" fires.
pub fn record_last_verification(finished_at: f64, drifted: i64, last_outcome: &str) {
    metrics::gauge!(names::LAST_VERIFY_TIME).set(finished_at);
    metrics::gauge!(names::LAST_VERIFY_DRIFTED).set(drifted as f64);
    for outcome in ["agreed", "drifted", "undecided", STALE_VERIFY] {
        metrics::gauge!(names::LAST_VERIFY_OUTCOME, "outcome" => outcome)
            .set(f64::from(u8::from(last_outcome == outcome)));
    }
}

/// The outcome the last-verify gauge gives a verify that ran before the database was
/// restored or failed over: whatever it found, it says nothing about the rows now.
pub const STALE_VERIFY: &str = "before_restore";

/// Whether the NATS connection is up (1) or lost (0).
pub fn record_nats_connected(connected: bool) {
    metrics::gauge!(names::NATS_CONNECTED).set(f64::from(u8::from(connected)));
}

/// The dead letters stored (the table's rows, whichever process stored them).
pub fn record_dead_letters(stored: i64) {
    metrics::gauge!(names::DEAD_LETTERS).set(stored as f64);
}

/// For each event of a committed batch, the time from its publication (JetStream's
/// timestamp) to the batch's commit.
pub fn record_publish_to_commit(waits: impl Iterator<Item = Duration>) {
    let histogram = metrics::histogram!(names::PUBLISH_TO_COMMIT);
    for waited in waits {
        histogram.record(waited.as_secs_f64());
    }
}

/// How far the read model is behind the stream ([`crate::daemon::staleness`]).
pub fn record_stream_behind(age: Duration, messages: u64) {
    metrics::gauge!(names::STREAM_BEHIND_SECONDS).set(age.as_secs_f64());
    metrics::gauge!(names::STREAM_BEHIND_MESSAGES).set(messages as f64);
}

/// `changes.<workspace>.<entity>.<id>` → `<entity>`, bounded to the two known entities
/// so a hostile subject cannot create time series.
fn entity_of(subject: &str) -> &'static str {
    match subject.split('.').nth(2) {
        Some("contacts") => "contacts",
        Some("items") => "items",
        _ => "other",
    }
}
