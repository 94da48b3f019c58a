//! One attempt of a due delivery and what it leaves: delivered (and the announced position
//! raised), retried after a back-off with jitter, or, past the retry period, the endpoint
//! disabled. Each outcome is recorded only while this process holds the endpoint's lease.

use std::time::Duration;

use rand::Rng;
use uuid::Uuid;

use super::Deliverer;
use crate::metric_names::{WEBHOOK_ATTEMPTS, WEBHOOK_DELIVERY_SECONDS};
use crate::webhooks::attempt::{self, Announcement, Outcome};
use crate::webhooks::secret::SigningSecret;
use crate::webhooks::store::{self, DueDelivery, RecordedFailure};
use crate::webhooks::Resource;

/// The longest wait between two retries.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);

impl Deliverer {
    /// One attempt of a due delivery, and its outcome recorded (only while the lease is
    /// this process's: a process that lost it leaves the outcome to the new holder).
    pub(super) async fn attempt(
        &self,
        endpoint_id: Uuid,
        workspace_id: Uuid,
        url: &str,
        secrets: &[SigningSecret],
        delivery: &DueDelivery,
    ) -> Result<(), sqlx::Error> {
        let Some(resource) = Resource::named(&delivery.resource) else { return Ok(()) };
        let Some(client) = &self.client else { return Ok(()) };
        let announcement = Announcement { id: &delivery.id, workspace_id, resource, since: delivery.created_at };
        let outcome = attempt::send(client, self.settings.policy, url, &announcement, secrets).await;
        let _turn = self.turns.take(workspace_id).await;
        let (status, error) = match &outcome {
            Outcome::Delivered(status) => (Some(i32::from(*status)), None),
            Outcome::Refused(status) => (Some(i32::from(*status)), Some(format!("answered {status}"))),
            Outcome::Failed(error) => (None, Some(error.clone())),
        };
        if let Outcome::Delivered(answered) = outcome {
            let recorded = store::record_delivered(
                &self.pool,
                self.owner,
                endpoint_id,
                &delivery.id,
                resource,
                i32::from(answered),
            )
            .await?;
            if let Some(seconds) = recorded {
                metrics::histogram!(WEBHOOK_DELIVERY_SECONDS).record(seconds);
            }
            metrics::counter!(WEBHOOK_ATTEMPTS, "outcome" => "delivered").increment(1);
            return Ok(());
        }
        let error = error.unwrap_or_default();
        let recorded =
            store::record_failed_attempt(&self.pool, self.owner, &delivery.id, status, &error, self.settings.retry_for)
                .await?;
        let Some(RecordedFailure { attempts, gave_up }) = recorded else { return Ok(()) };
        if gave_up {
            metrics::counter!(WEBHOOK_ATTEMPTS, "outcome" => "gave_up").increment(1);
            let reason = format!(
                "deliveries failed for {} s after the first attempt (last: {error})",
                self.settings.retry_for.as_secs()
            );
            tracing::warn!(%endpoint_id, %workspace_id, %reason, "webhook endpoint disabled");
            store::disable_after_failures(&self.pool, endpoint_id, &reason).await?;
            return Ok(());
        }
        metrics::counter!(WEBHOOK_ATTEMPTS, "outcome" => "failed").increment(1);
        let delay = retry_delay(self.settings.first_retry, attempts);
        tracing::warn!(%endpoint_id, delivery = %delivery.id, attempts, %error, retry_in_ms = delay.as_millis() as u64, "webhook delivery failed; retrying");
        store::schedule_retry(&self.pool, &delivery.id, delay).await?;
        Ok(())
    }
}

/// After `attempts` failed attempts: `first` doubled for each, at most an hour, and
/// "equal jitter" (between half and all of it) so that endpoints that failed together do
/// not retry together.
fn retry_delay(first: Duration, attempts: i32) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1)).unwrap_or(0).min(20);
    let full = first.saturating_mul(1 << doublings).min(MAX_RETRY_DELAY);
    full / 2 + full.mul_f64(rand::thread_rng().gen_range(0.0..0.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_twice_as_long_each_time_with_jitter_up_to_an_hour() {
        let first = Duration::from_secs(5);
        for (attempts, full) in [(1, 5), (2, 10), (3, 20), (10, 2_560), (30, 3_600)] {
            for _ in 0..50 {
                let delay = retry_delay(first, attempts);
                let full = Duration::from_secs(full);
                assert!(
                    delay >= full / 2 && delay <= full,
                    "attempt {attempts}: {delay:?} outside {full:?}/2..{full:?}"
                );
            }
        }
    }
}
