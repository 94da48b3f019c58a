//! One pull from the durable consumer, and when to give up waiting for its answer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::error::ProjectorError;

/// How long past its own wait a pull may go unanswered. A no-wait fetch has no
/// client-side timeout in async-nats, so a request lost with a NATS restart (sent to
/// the old server, unknown to the new one) would otherwise stop the projector for good.
const PULL_STALL: Duration = Duration::from_secs(5);

/// How often a pull in progress looks for a reconnect of its client.
const RECONNECT_CHECK: Duration = Duration::from_millis(100);

/// One pull. While a backlog drains, a no-wait fetch returns at once with up to
/// `batch_size` messages. When idle, the pull asks for a single message and returns the
/// moment it arrives, so a trickle of events becomes visible within one transaction's
/// time; the next pull is a no-wait fetch again and picks up whatever followed it. (A
/// waiting pull for a whole batch would hold the first event until the batch filled or
/// the pull expired.)
///
/// A pull whose connection drops is lost with it, and the pull returns at once so that
/// the next one goes out on the new connection. Waiting out `PULL_STALL` instead
/// would let a message that async-nats cannot read (NATS takes a subject that is not
/// UTF-8; the client drops its connection on reading it) stop the projector: it is
/// redelivered every [`crate::stream::ACK_WAIT`], which is shorter than the stall, so
/// every later pull would get it first, lose its connection again, and nothing after it
/// would ever be delivered.
/// How much one pull asks for, and how long an idle one waits.
#[derive(Clone, Copy, Debug)]
pub struct PullSize {
    /// Most messages of a batch.
    pub batch_size: usize,
    /// How long an idle pull waits for the next message.
    pub pull_wait: Duration,
}

pub async fn pull(
    consumer: &jetstream::consumer::PullConsumer,
    client: &async_nats::Client,
    size: PullSize,
    catching_up: bool,
    shutdown: &CancellationToken,
) -> Result<Vec<jetstream::Message>, ProjectorError> {
    let statistics = client.statistics();
    let connects = statistics.connects.load(Ordering::Relaxed);
    let mut messages = if catching_up {
        consumer.fetch().max_messages(size.batch_size).messages().await
    } else {
        consumer.batch().max_messages(1).expires(size.pull_wait).messages().await
    }
    .map_err(ProjectorError::nats("pulling from the consumer"))?;
    let mut batch = Vec::with_capacity(size.batch_size);
    let stalled = tokio::time::sleep(size.pull_wait + PULL_STALL);
    tokio::pin!(stalled);
    let reconnected = async {
        while statistics.connects.load(Ordering::Relaxed) == connects {
            tokio::time::sleep(RECONNECT_CHECK).await;
        }
    };
    tokio::pin!(reconnected);
    loop {
        let next = tokio::select! {
            next = messages.next() => next,
            () = shutdown.cancelled(), if batch.is_empty() => return Ok(batch),
            () = &mut stalled => {
                tracing::debug!(messages = batch.len(), "a pull went unanswered; pulling again");
                return Ok(batch);
            }
            () = &mut reconnected => {
                tracing::debug!(messages = batch.len(), "the connection dropped during a pull; pulling again");
                return Ok(batch);
            }
        };
        match next {
            Some(Ok(message)) => batch.push(message),
            Some(Err(error)) if batch.is_empty() => {
                return Err(ProjectorError::nats("receiving pulled messages")(error))
            }
            // A pull that ends in an error after some messages still delivered them.
            Some(Err(_)) | None => return Ok(batch),
        }
    }
}
