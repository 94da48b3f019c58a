//! Signing secrets follow the key pepper as key hashes do. Each is sealed under the pepper
//! current when it was made; once the pepper rotates, the process delivering for an
//! endpoint seals its secrets again under the new one at its next look (at least every
//! [`super::IDLE_SWEEP`]), so that retiring the old pepper stops no delivery. An enabled
//! endpoint sealed under a pepper this process lacks cannot be signed for: counted in a
//! metric and named in readiness, which every process reads from the database.

use uuid::Uuid;

use super::{Deliverer, LookError, FAILING_SHOWN};
use crate::keys::PepperDependency;
use crate::metric_names::WEBHOOK_ENDPOINTS_CANNOT_SIGN;
use crate::webhooks::secret::SigningSecret;
use crate::webhooks::store::{self, HeldEndpoint, Sealed};

impl Deliverer {
    /// Seals the endpoint's secrets again under the current pepper when they are sealed
    /// under a listed previous one. Under an unknown pepper nothing can be done here: the
    /// look goes on, and the endpoint is counted by [`Self::endpoints_that_cannot_sign`].
    pub(super) async fn follow_the_pepper(&self, id: Uuid, endpoint: &mut HeldEndpoint) -> Result<(), LookError> {
        if self.peppers.dependency(Some(&endpoint.pepper_fingerprint)) != PepperDependency::Previous {
            return Ok(());
        }
        let open = |sealed: &[u8]| SigningSecret::open(sealed, &endpoint.pepper_fingerprint, &self.peppers, id);
        let secret = open(&endpoint.secret_sealed)?;
        let previous = endpoint.previous_secret_sealed.as_deref().map(open).transpose()?;
        let current = self.peppers.current();
        let fingerprint = current.fingerprint();
        let (secret_sealed, previous_sealed) = (secret.seal(current, id), previous.map(|old| old.seal(current, id)));
        let was = Sealed {
            secret: &endpoint.secret_sealed,
            previous_secret: endpoint.previous_secret_sealed.as_deref(),
            pepper_fingerprint: &endpoint.pepper_fingerprint,
        };
        let now = Sealed {
            secret: &secret_sealed,
            previous_secret: previous_sealed.as_deref(),
            pepper_fingerprint: &fingerprint,
        };
        if store::reseal(&self.pool, id, &was, &now).await? {
            tracing::info!(endpoint_id = %id, "webhook signing secrets sealed again under the current key pepper");
            endpoint.secret_sealed = secret_sealed;
            endpoint.previous_secret_sealed = previous_sealed;
            endpoint.pepper_fingerprint = fingerprint.to_vec();
        }
        Ok(())
    }

    /// Counts the enabled endpoints sealed under none of this process's peppers, and what
    /// readiness says of the first of them.
    pub(super) async fn endpoints_that_cannot_sign(&self) -> Result<Vec<String>, sqlx::Error> {
        let fingerprints: Vec<Vec<u8>> = self.peppers.all().map(|pepper| pepper.fingerprint().to_vec()).collect();
        let (count, shown) =
            store::endpoints_sealed_under_other_peppers(&self.pool, &fingerprints, FAILING_SHOWN).await?;
        metrics::gauge!(WEBHOOK_ENDPOINTS_CANNOT_SIGN).set(count as f64);
        Ok(shown
            .into_iter()
            .map(|(id, workspace_id)| {
                format!(
                    "webhook endpoint {id} (workspace {workspace_id}) cannot be signed for: its secret is sealed under \
                     a key pepper this process does not have; list that pepper in LECTERN_PREVIOUS_KEY_PEPPERS again \
                     (`lectern-api webhooks list --pepper unknown` shows every such endpoint)"
                )
            })
            .collect())
    }
}
