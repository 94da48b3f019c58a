//! What the projector set aside, which no row reflects: the events stored as dead letters
//! and those that break the contract. `verify` and `rebuild` compute the read model from
//! the stream, and leave these out of it as the projector did.

use std::collections::HashSet;

use lectern_schema::events::ChangeEvent;

use crate::message::Received;

/// The events of `batch` the projector applies: valid ones that are not dead letters.
/// The others are counted in `set_aside`.
pub fn applied_events(batch: &[Received], dead_letters: &HashSet<i64>, set_aside: &mut u64) -> Vec<ChangeEvent> {
    let mut events = Vec::with_capacity(batch.len());
    for message in batch {
        let sequence = i64::try_from(message.stream_sequence).unwrap_or(i64::MAX);
        match ChangeEvent::decode_from(&message.subject, &message.payload) {
            Ok(event) if !dead_letters.contains(&sequence) => events.push(event),
            _ => *set_aside += 1,
        }
    }
    events
}
