//! Messages in hand, pulled and not yet acknowledged, kept ours while they are
//! legitimately slow.
//!
//! JetStream hands a message to another projector once [`ACK_WAIT`](crate::stream::ACK_WAIT) has passed since
//! its delivery or its last progress ack. The ack wait is short so that the messages of a
//! projector killed mid-batch come back within seconds; a batch that is slow for good
//! reasons (waiting on a lock, retrying through an outage, waiting for its flush
//! barrier) must not come back with them, so each of its messages gets a progress ack
//! every [`PROGRESS_EVERY`] until it is acknowledged or handed back. A batch done within
//! that interval, as nearly all are, sends none.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use tokio::task::AbortHandle;

/// How often messages in hand are reported in progress: a fifth of
/// [`crate::stream::ACK_WAIT`], so that four in a row can be late or lost before a
/// message is redelivered (a test below holds the two to that ratio).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// One batch's messages, kept alive with progress acks until [`InHand::acknowledge`] or
/// [`InHand::hand_back`] (or until dropped, after which JetStream redelivers them).
pub struct InHand {
    messages: Arc<[Message]>,
    keep_alive: AbortHandle,
}

impl InHand {
    /// Takes `messages` in hand; must be called on the runtime.
    pub fn new(messages: Vec<Message>) -> Self {
        let messages: Arc<[Message]> = messages.into();
        let keep_alive = tokio::spawn(keep_alive(messages.clone())).abort_handle();
        Self { messages, keep_alive }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Acknowledges every message: its effect is committed and on disk.
    pub async fn acknowledge(self) {
        self.keep_alive.abort();
        for message in self.messages.iter() {
            // An ack lost here means a redelivery, which the version guard makes harmless.
            if let Err(error) = message.ack().await {
                tracing::warn!(%error, "acknowledgement failed; the message will be redelivered and ignored");
            }
        }
    }

    /// Hands every message back for redelivery at once rather than after the ack wait.
    pub async fn hand_back(self) {
        self.keep_alive.abort();
        for message in self.messages.iter() {
            // Without the nak, the message comes back all the same after the ack wait.
            let _ = message.ack_with(AckKind::Nak(None)).await;
        }
    }
}

impl Drop for InHand {
    fn drop(&mut self) {
        self.keep_alive.abort();
    }
}

async fn keep_alive(messages: Arc<[Message]>) {
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    // After a stall, one round of progress acks is enough; a burst of them is not better.
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        for message in messages.iter() {
            // One lost is made good by the next; the ack wait allows several.
            let _ = message.ack_with(AckKind::Progress).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PROGRESS_EVERY;
    use crate::stream::ACK_WAIT;

    #[test]
    fn messages_in_hand_get_five_progress_acks_per_ack_wait() {
        assert_eq!(PROGRESS_EVERY * 5, ACK_WAIT);
    }
}
